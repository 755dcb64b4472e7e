"""The layout value: canonical text, legacy dpN, mesh dims, and how settings resolve into it."""

from __future__ import annotations

import pytest

from greenbench.errors import SpecError
from greenbench.vocabulary import Layout, resolve_layout


def test_canonical_text_round_trips_and_orders_mesh_dims():
    layout = Layout(dp_replicate=2, dp_shard=1, tp=2, pp=3, cp=1)
    assert layout.text == "dpr2-dps1-tp2-pp3-cp1"
    assert Layout.parse(layout.text) == layout
    assert layout.world == 12 and layout.dp == 2
    # outermost first (pp, dp_replicate, dp_shard, cp, tp); degrees of 1 have no dimension
    assert layout.mesh_dims() == (("pp", 3), ("dp_replicate", 2), ("tp", 2))
    assert Layout().mesh_dims() == () and Layout().world == 1


def test_legacy_dp_text_needs_the_strategy():
    assert Layout.parse("dp4", strategy="fsdp") == Layout(dp_shard=4)
    assert Layout.parse("dp4", strategy="ddp") == Layout(dp_replicate=4)
    assert Layout.parse("dp1", strategy="single") == Layout()
    with pytest.raises(SpecError, match="not a layout"):
        Layout.parse("tp2")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_degrees_are_positive_integers(bad):
    with pytest.raises(SpecError, match=r"layout\.tp must be an integer >= 1"):
        Layout(tp=bad)


def resolve(given, world, strategy="ddp", applies=("dp_replicate",), fills="dp_replicate"):
    appliers = {"tp": ["hybrid"], "dp_shard": ["fsdp"]}
    return resolve_layout(
        given, world=world, strategy=strategy, applies=applies, fills=fills, appliers=appliers
    )


def test_the_strategy_fills_its_degree_from_the_world_size():
    assert resolve({}, 4) == Layout(dp_replicate=4)
    assert resolve({}, 4, "fsdp", ("dp_shard",), "dp_shard") == Layout(dp_shard=4)
    assert resolve({}, None) == Layout()  # no world given, nothing to fill: one rank
    assert resolve({"dp_replicate": 3}, None) == Layout(dp_replicate=3)  # world derived
    assert resolve({}, 1, "single", (), None) == Layout()


def test_world_size_errors_name_the_numbers():
    with pytest.raises(SpecError, match=r"layout.tp=2 does not divide the world size .* = 3"):
        resolve({"tp": 2}, 3, "hybrid", ("dp_shard", "tp"), "dp_shard")
    with pytest.raises(SpecError, match=r"needs 2 ranks but nproc×nnodes = 4"):
        resolve({"dp_replicate": 2}, 4)
    with pytest.raises(SpecError, match="runs one rank"):
        resolve({}, 2, "single", (), None)


def test_a_degree_the_strategy_cannot_apply_names_who_can():
    with pytest.raises(SpecError, match=r"'ddp' does not apply layout.tp=2 .*strategy 'hybrid'"):
        resolve({"tp": 2}, 4)
    with pytest.raises(SpecError, match=r"does not apply layout.pp=2 .*no strategy applies it yet"):
        resolve({"pp": 2}, 4)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("tp2-dps2", "dpr1-dps2-tp2-pp1-cp1"),
        ("PP4", "dpr1-dps1-tp1-pp4-cp1"),
        ("cp2xdps2", "dpr1-dps2-tp1-pp1-cp2"),
        ("dps2 × tp2 × pp2", "dpr1-dps2-tp2-pp2-cp1"),
        ("dpr1-dps4-tp1-pp1-cp1", "dpr1-dps4-tp1-pp1-cp1"),
    ],
)
def test_a_short_layout_names_its_degrees_and_leaves_the_rest_at_one(text: str, canonical: str):
    layout = Layout.from_short(text)
    assert layout.text == canonical
    assert Layout.from_short(layout.short) == layout


@pytest.mark.parametrize("text", ["", "tp", "tp2-tp2", "xp2", "tp0"])
def test_a_malformed_short_layout_is_refused(text: str):
    with pytest.raises(SpecError):
        Layout.from_short(text)
