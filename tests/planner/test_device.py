"""The planner's device model: figures from the GPU table, their sources, power limits and a
calibration."""

from __future__ import annotations

import pytest

from greenbench.errors import SpecError
from greenbench.planner.alpha_beta import Link
from greenbench.planner.device import Calibration, device_model


def test_h100_figures_and_sources() -> None:
    d = device_model("h100", "bf16")
    assert d.label == "H100 SXM"
    assert d.peak_flops == 989e12 and d.sustained_flops == pytest.approx(0.4 * 989e12)
    assert d.memory_bytes == 80e9 and d.fast_domain == 8
    assert d.fast.beta_s_per_byte == pytest.approx(1 / 450e9)
    assert d.network.beta_s_per_byte == pytest.approx(1 / 50e9)
    assert (d.power.busy_w, d.power.idle_w) == (pytest.approx(630), 75)
    assert d.sources["idle power"].startswith("measured")
    assert d.sources["sustained FLOP/s"].startswith("assumed")
    assert device_model("h100", "fp32").peak_flops == 67e12


@pytest.mark.parametrize("name", ["tpu-v5", "H20", ""])
def test_unknown_device_type_names_the_choices(name: str) -> None:
    with pytest.raises(SpecError, match=r"unknown device type.*h100"):
        device_model(name, "bf16")


def test_bad_precision() -> None:
    with pytest.raises(SpecError, match="--precision"):
        device_model("h100", "fp8")


@pytest.mark.parametrize("limit", [150, 701])
def test_a_power_limit_outside_the_range_is_refused(limit: float) -> None:
    with pytest.raises(SpecError, match="200–700 W"):
        device_model("h100", "bf16", power_limit_w=limit)


def test_a_limit_above_busy_power_changes_nothing() -> None:
    d = device_model("h100", "bf16", power_limit_w=680)
    assert d.power.slowdown == 1.0 and d.power.busy_w == pytest.approx(630)


def test_a_calibration_replaces_what_it_fitted_and_says_so() -> None:
    c = Calibration(fast=Link(1e-5, 1 / 200e9), sustained_flops=3e14, busy_w=600.0,
                    idle_w=70.0, runs={"fast": 3, "sustained_flops": 1, "busy_w": 2,
                                       "idle_w": 2})  # fmt: skip
    d = device_model("h100", "bf16", power_limit_w=500, calibration=c)
    assert d.fast == c.fast and d.sustained_flops == 3e14
    assert d.network.beta_s_per_byte == pytest.approx(1 / 50e9)  # not fitted: unchanged
    assert d.power.busy_w == 500 and d.power.slowdown == pytest.approx((600 / 500) ** (1 / 3))
    assert d.sources["fast link"] == "fitted from 3 stored runs on this host"
    assert d.sources["sustained FLOP/s"] == "fitted from 1 stored run on this host"
    assert d.sources["network"].startswith("assumed")
    assert "500 W" in d.sources["power limit"]
