"""greenbench.reporting.young_daly against hand computations: Young's sqrt(2δM), Daly's
higher-order form and its δ ≥ 2M case, the waste fraction δ/τ + (τ/2 + R)/M, and the optimum
of a run's measured figures converted to steps."""

from __future__ import annotations

import math

import pytest

from greenbench.reporting.young_daly import (
    Optimum,
    daly_interval,
    waste_curve,
    waste_fraction,
    young_interval,
)


def test_young_is_the_square_root_of_twice_cost_times_mtbf():
    # δ = 2 s, M = 100 s: sqrt(2·2·100) = 20 s
    assert young_interval(2.0, 100.0) == pytest.approx(20.0)
    assert young_interval(0.5, 8.0) == pytest.approx(math.sqrt(8.0))
    assert young_interval(0.0, 100.0) == 0.0  # free checkpoints: as often as possible


def test_daly_adds_the_higher_order_terms():
    # δ/(2M) = 0.01: 20·(1 + 0.1/3 + 0.01/9) − 2 = 18.68889 s
    assert daly_interval(2.0, 100.0) == pytest.approx(20.0 * (1 + 0.1 / 3 + 0.01 / 9) - 2.0)
    assert daly_interval(2.0, 100.0) == pytest.approx(18.688889, abs=1e-6)
    # δ/(2M) = 0.25: sqrt(2·50·100) = 100 → 100·(1 + 0.5/3 + 0.25/9) − 50 = 69.4444 s
    assert daly_interval(50.0, 100.0) == pytest.approx(100 * (1 + 0.5 / 3 + 0.25 / 9) - 50)


def test_daly_is_the_mtbf_where_a_checkpoint_costs_twice_it_or_more():
    assert daly_interval(200.0, 100.0) == 100.0
    assert daly_interval(300.0, 100.0) == 100.0
    assert daly_interval(1.0, math.inf) == math.inf


def test_waste_fraction_by_hand():
    # τ = 20, δ = 2, M = 100, R = 5: 2/20 + (10 + 5)/100 = 0.25
    assert waste_fraction(20.0, 2.0, 100.0, 5.0) == pytest.approx(0.25)
    assert waste_curve([10.0, 20.0], 2.0, 100.0, 0.0) == pytest.approx([0.25, 0.2])


def test_young_minimises_the_first_order_waste():
    tau = young_interval(2.0, 100.0)
    best = waste_fraction(tau, 2.0, 100.0, 3.0)
    for other in (tau * 0.8, tau * 0.95, tau * 1.05, tau * 1.25):
        assert waste_fraction(other, 2.0, 100.0, 3.0) > best


@pytest.mark.parametrize(
    ("delta", "mtbf", "tau"), [(-1.0, 100.0, 1.0), (1.0, 0.0, 1.0), (1.0, 10.0, 0.0)]
)
def test_impossible_figures_are_refused(delta: float, mtbf: float, tau: float):
    with pytest.raises(ValueError):
        waste_fraction(tau, delta, mtbf, 0.0)


def test_the_optimum_of_a_runs_measured_figures():
    # 8 checkpoints waited 0.4 s in all (δ = 0.05 s), one failure in a run of 10 s (M = 10 s),
    # its restart 6 s, a step 0.1 s: Young sqrt(2·0.05·10) = 1 s = 10 steps
    o = Optimum.measured(ckpt_s=0.4, ckpt_count=8, seconds=10.0, failures=1, restart_s=6.0,
                         step_s=0.1)  # fmt: skip
    assert o is not None
    assert (o.delta_s, o.mtbf_s, o.restart_s) == pytest.approx((0.05, 10.0, 6.0))
    assert o.young_s == pytest.approx(1.0) and o.young_steps == pytest.approx(10.0)
    # δ/(2M) = 0.0025: 1·(1 + 0.05/3 + 0.0025/9) − 0.05 = 0.966944 s
    assert o.daly_s == pytest.approx(1 + 0.05 / 3 + 0.0025 / 9 - 0.05)
    assert o.daly_steps == pytest.approx(o.daly_s / 0.1)
    # every 4 steps = 0.4 s: 0.05/0.4 + (0.2 + 6)/10 = 0.745
    assert o.waste(4) == pytest.approx(0.745)
    # two failures halve M and R per failure
    two = Optimum.measured(0.4, 8, 10.0, 2, 6.0, 0.1)
    assert two is not None and (two.mtbf_s, two.restart_s) == pytest.approx((5.0, 3.0))


def test_no_optimum_without_a_checkpoint_a_failure_or_a_step_time():
    assert Optimum.measured(0.0, 0, 10.0, 1, 6.0, 0.1) is None
    assert Optimum.measured(0.4, 8, 10.0, 0, 0.0, 0.1) is None
    assert Optimum.measured(0.4, 8, 10.0, 1, 6.0, 0.0) is None
    assert Optimum.measured(math.nan, 8, 10.0, 1, 6.0, 0.1) is None
