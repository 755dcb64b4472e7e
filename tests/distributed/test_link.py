"""The emulated link (``emulate.link_*``): a ring all-reduce's time over it, read from a run's
settings in bytes per second, labelled; it enters a DDP run's identity only where it is set,
and a strategy that does not emulate it refuses it."""

from __future__ import annotations

import pytest

from greenbench.distributed.link import EmulatedLink
from greenbench.errors import SpecError
from greenbench.settings import spec_identity, spec_key
from greenbench.spec import LINK_KEYS, expand

LATENCY, BANDWIDTH = LINK_KEYS  # emulate.link_latency_ms, emulate.link_bandwidth_gbps


def test_a_ring_all_reduce_sends_2_world_minus_1_messages_of_a_world_share():
    link = EmulatedLink(latency_s=0.01, bytes_per_s=1e6)
    # 1001 bytes over 4 nodes: messages of ceil(1001 / 4) = 251 bytes, 2 * 3 of them
    assert link.all_reduce_s(1001, 4) == pytest.approx(6 * (0.01 + 251 / 1e6))
    assert link.all_reduce_s(1000, 2) == pytest.approx(2 * (0.01 + 500 / 1e6))
    assert link.message_s(2000) == pytest.approx(0.01 + 2000 / 1e6)
    # latency alone, bandwidth alone
    assert EmulatedLink(latency_s=0.005).all_reduce_s(10**9, 3) == pytest.approx(4 * 0.005)
    assert EmulatedLink(bytes_per_s=100.0).all_reduce_s(300, 3) == pytest.approx(4 * 1.0)


def test_an_inactive_link_or_a_single_node_costs_nothing():
    assert not EmulatedLink().active
    assert EmulatedLink().all_reduce_s(10**9, 8) == 0.0
    assert EmulatedLink(latency_s=0.01).all_reduce_s(10**9, 1) == 0.0
    assert EmulatedLink().delay(0.0) == 0.0 and EmulatedLink().delay(-1.0) == 0.0


def test_the_label_says_latency_and_bandwidth():
    assert EmulatedLink().label() == ""
    assert EmulatedLink(0.01, 1e9 / 8).label() == "emulated link 10 ms, 1 Gb/s"
    assert EmulatedLink(latency_s=0.0025).label() == "emulated link 2.5 ms, unlimited"
    assert EmulatedLink(bytes_per_s=25e9 / 8).label() == "emulated link 0 ms, 25 Gb/s"


def test_of_reads_the_run_settings_in_seconds_and_bytes_per_second():
    (spec,) = expand(
        "data-parallel",
        [{"strategy": "ddp", "data.lengths": "fixed", LATENCY: 20.0, BANDWIDTH: 8.0}],
    )
    link = EmulatedLink.of(spec.config)
    assert link.latency_s == pytest.approx(0.02)
    assert link.bytes_per_s == pytest.approx(1e9)  # 8 Gb/s
    assert link.active
    (plain,) = expand("data-parallel", [{"strategy": "ddp", "data.lengths": "fixed"}])
    assert EmulatedLink.of(plain.config) == EmulatedLink()


def test_a_ddp_runs_key_changes_only_where_a_link_is_set():
    base = {"strategy": "ddp", "data.lengths": "fixed"}
    (plain,) = expand("data-parallel", [base])
    (zero,) = expand("data-parallel", [{**base, LATENCY: 0.0, BANDWIDTH: 0.0}])
    (slow,) = expand("data-parallel", [{**base, LATENCY: 5.0}])
    (narrow,) = expand("data-parallel", [{**base, BANDWIDTH: 1.0}])
    assert not set(LINK_KEYS) & spec_identity(plain).keys()
    assert spec_key(zero) == spec_key(plain)  # the defaults, stated, are no link
    assert spec_identity(slow)[LATENCY] == 5.0
    keys = {spec_key(plain), spec_key(slow), spec_key(narrow)}
    assert len(keys) == 3


def test_a_strategy_that_does_not_emulate_a_link_refuses_it():
    with pytest.raises(SpecError, match="emulates a link for strategy=ddp or skippipe"):
        expand("data-parallel", [{"strategy": "fsdp", "data.lengths": "fixed", LATENCY: 5.0}])
    with pytest.raises(SpecError, match="not strategy=fsdp"):
        expand("data-parallel", [{"strategy": "fsdp", "data.lengths": "fixed", BANDWIDTH: 1.0}])
