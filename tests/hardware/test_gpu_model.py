"""The GPU power model against its power limit (greenbench.hardware.gpu_model): the law, the
H100 figures the docs quote, and the planner pricing a limit the same way."""

from __future__ import annotations

import pytest

from greenbench.hardware.gpu_model import (
    MAX_SM_CLOCK_MHZ,
    GpuPowerModel,
    clock_fraction,
    slowdown,
)
from greenbench.hardware.gpus import gpu_facts
from greenbench.planner.power import under_limit

H100 = GpuPowerModel.of(gpu_facts("h100"))


def test_the_h100_model_starts_from_its_measured_figures():
    assert (H100.default_limit_w, H100.min_limit_w, H100.max_limit_w) == (700, 200, 700)
    assert H100.idle_w == 75 and H100.busy_w == pytest.approx(630)


@pytest.mark.parametrize("limit_w", [385.0, 490.0, 595.0])
def test_below_the_busy_power_the_clock_falls_as_the_cube_root(limit_w):
    assert clock_fraction(limit_w, 630) == pytest.approx((limit_w / 630) ** (1 / 3))
    assert H100.slowdown(limit_w) == pytest.approx((630 / limit_w) ** (1 / 3))
    assert H100.sm_clock_mhz(limit_w) < MAX_SM_CLOCK_MHZ


def test_a_limit_above_the_draw_changes_nothing():
    assert H100.slowdown(700) == 1.0 and H100.busy_power_w(700) == pytest.approx(630)
    assert H100.sm_clock_mhz(700) == MAX_SM_CLOCK_MHZ


def test_energy_per_unit_of_work_falls_as_the_two_thirds_power_of_the_limit():
    def energy(limit_w: float) -> float:
        return H100.busy_power_w(limit_w) * H100.slowdown(limit_w)

    ratios = [energy(w) / energy(700) for w in (595, 490, 385)]
    assert ratios == sorted(ratios, reverse=True)
    # the figure docs/power-limits.md and the model's docstring quote: 490 W
    assert 1 - ratios[1] == pytest.approx(0.154, abs=0.002)
    assert H100.slowdown(490) - 1 == pytest.approx(0.087, abs=0.002)


def test_power_between_idle_and_busy_follows_the_load():
    assert H100.power_w(490, 0.0) == 75
    assert H100.power_w(490, 1.0) == 490
    assert H100.power_w(490, 0.5) == pytest.approx(75 + 0.5 * (490 - 75))
    assert H100.power_w(490, 7.0) == 490  # clamped


def test_bad_arguments():
    with pytest.raises(ValueError):
        slowdown(0, 630)


def test_the_planner_prices_a_limit_with_the_same_law():
    power = under_limit(630, 75, 490, min_limit_w=200, board_power_w=700)
    assert power.slowdown == pytest.approx(H100.slowdown(490))
    assert power.busy_w == 490
