"""Tests of greenbench.stats: rank test, Holm, CV, log-t prediction interval, median CI."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from greenbench import stats


def _brute_force_p(a: list[float], b: list[float]) -> float:
    """P(rank sum of a ≥ observed) over every split of the pooled midranks."""
    pooled = np.array(a + b, dtype=float)
    ranks = sps.rankdata(pooled)
    observed = ranks[: len(a)].sum()
    sums = [ranks[list(c)].sum() for c in itertools.combinations(range(len(pooled)), len(a))]
    return float(np.mean(np.array(sums) >= observed - 1e-9))


@pytest.mark.parametrize(("n", "m"), [(1, 1), (3, 3), (7, 7), (5, 9), (12, 10)])
def test_mannwhitney_matches_scipy_exact_without_ties(n: int, m: int) -> None:
    rng = np.random.default_rng(n * 100 + m)
    for shift in (-1.0, 0.0, 0.7, 3.0):
        a, b = rng.normal(shift, 1, n), rng.normal(0, 1, m)
        u, p = stats.mannwhitney_greater(a, b)
        ref = sps.mannwhitneyu(a, b, alternative="greater", method="exact")
        assert u == pytest.approx(ref.statistic)
        assert p == pytest.approx(ref.pvalue, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=5),
    st.lists(st.integers(0, 3), min_size=1, max_size=5),
)
def test_mannwhitney_with_ties_is_the_exact_permutation_p(a: list[int], b: list[int]) -> None:
    fa, fb = [float(x) for x in a], [float(x) for x in b]
    _, p = stats.mannwhitney_greater(fa, fb)
    assert p == pytest.approx(_brute_force_p(fa, fb), rel=1e-9)
    # P(U ≥ u) + P(U ≤ u) = 1 + P(U = u) ≥ 1
    assert p + stats.mannwhitney_greater(fb, fa)[1] >= 1 - 1e-12


def test_mannwhitney_large_samples_use_normal_approximation() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.3, 1, 100), rng.normal(0, 1, 100)
    ref = sps.mannwhitneyu(a, b, alternative="greater", method="asymptotic")
    assert stats.mannwhitney_greater(a, b)[1] == pytest.approx(ref.pvalue)


def test_mannwhitney_p_is_valid_under_the_null() -> None:
    rng = np.random.default_rng(11)
    ps = np.array(
        [stats.mannwhitney_greater(rng.normal(size=7), rng.normal(size=7))[1] for _ in range(3000)]
    )
    # a valid p-value: P(p ≤ α) ≤ α (binomial noise allowance: 3000 trials, sd ≈ 0.0018 at 1 %)
    for alpha in (0.01, 0.05, 0.2):
        assert np.mean(ps <= alpha) <= alpha + 4 * math.sqrt(alpha / 3000)


def test_mannwhitney_rejects_empty_samples() -> None:
    with pytest.raises(ValueError):
        stats.mannwhitney_greater([], [1.0])


def test_min_p_value() -> None:
    assert stats.min_p_value(7, 7) == pytest.approx(1 / 3432)
    assert stats.min_p_value(3, 3) == pytest.approx(0.05)
    assert stats.min_p_value(0, 5) == 1.0
    # it is attained: complete separation
    assert stats.mannwhitney_greater([5, 6, 7], [1, 2, 3])[1] == pytest.approx(0.05)


def test_holm_by_hand() -> None:
    adjusted = stats.holm([0.01, 0.04, 0.03, math.nan, 0.005])
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 → monotone 0.06
    assert adjusted[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(adjusted[3])
    assert adjusted[4] == pytest.approx(0.02)
    assert stats.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])
    assert stats.holm([]) == []


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=20))
def test_holm_is_monotone_and_at_least_raw(ps: list[float]) -> None:
    adjusted = stats.holm(ps)
    for raw, adj in zip(ps, adjusted, strict=True):
        assert raw <= adj + 1e-15 <= 1 + 1e-15
    order = np.argsort(ps, kind="stable")
    assert all(np.diff(np.array(adjusted)[order]) >= -1e-15)


def test_coefficient_of_variation() -> None:
    assert stats.coefficient_of_variation([1.0, 1.0, 1.0]) == 0.0
    assert stats.coefficient_of_variation([1.0, 3.0]) == pytest.approx(math.sqrt(2) / 2)
    assert math.isnan(stats.coefficient_of_variation([1.0]))
    assert math.isnan(stats.coefficient_of_variation([-1.0, 1.0]))


def test_log_t_prediction_matches_the_formula() -> None:
    history = [1.0, 1.1, 0.95, 1.05, 1.02]
    logs = np.log(history)
    k = len(logs)
    se = logs.std(ddof=1) * math.sqrt(1 + 1 / k)
    t, p = stats.log_t_prediction(history, 1.2)
    assert t == pytest.approx((math.log(1.2) - logs.mean()) / se)
    assert p == pytest.approx(sps.t.sf(t, k - 1))
    bound = stats.log_prediction_bound(history, 0.99)
    # the bound is where the one-sided p equals 1 − confidence
    assert stats.log_t_prediction(history, bound)[1] == pytest.approx(0.01)


def test_log_t_prediction_calibrated_under_the_null() -> None:
    rng = np.random.default_rng(5)
    hits = 0
    trials = 4000
    for _ in range(trials):
        xs = rng.lognormal(0, 0.05, 11)
        hits += stats.log_t_prediction(xs[:10], float(xs[10]))[1] < 0.05
    assert abs(hits / trials - 0.05) < 4 * math.sqrt(0.05 * 0.95 / trials)


def test_log_t_prediction_edge_cases() -> None:
    assert stats.log_t_prediction([2.0, 2.0, 2.0], 2.0)[1] == 0.5
    assert stats.log_t_prediction([2.0, 2.0], 3.0)[1] == 0.0
    assert stats.log_t_prediction([2.0, 2.0], 1.0)[1] == 1.0
    with pytest.raises(ValueError):
        stats.log_t_prediction([1.0], 1.0)
    with pytest.raises(ValueError):
        stats.log_t_prediction([1.0, 2.0], 0.0)


def test_median_ci_and_percentile_unchanged() -> None:
    med, lo, hi = stats.median_ci(list(range(1, 11)))
    assert med == 5.5 and lo <= med <= hi
    assert stats.percentile([1, 2, 3, 4], 50) == 2.5
