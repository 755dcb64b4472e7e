"""Small, pure statistics used across greenbench (summaries, CI verdicts, the dashboard).

Distribution-free where it can be: benchmark timings and energies are skewed and have outliers,
so medians with order-statistic confidence intervals are reported rather than means ± σ.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


def _numpy() -> ModuleType:
    """numpy, imported by the functions that need it (and scipy likewise): a stored run's
    medians need neither, and ``greenbench measure`` stores one without paying for their
    import."""
    import numpy

    return numpy


def _scipy_stats() -> ModuleType:
    from scipy import stats

    return stats


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Median and a distribution-free confidence interval for it, as (median, low, high).

    The interval is [x_(j), x_(n+1-j)] for the largest j whose binomial coverage
    1 − 2·P(Bin(n, ½) < j) still reaches ``confidence``. With too few samples for that
    coverage (n < 6 at 95 %) the widest interval, [min, max], is returned.
    """
    xs = sorted(float(v) for v in values)
    n = len(xs)
    if n == 0:
        raise ValueError("median_ci needs at least one value")
    med = float(_median_sorted(xs))
    j_best = 1
    for j in range(1, n // 2 + 1):
        coverage = 1.0 - 2.0 * float(_scipy_stats().binom.cdf(j - 1, n, 0.5))
        if coverage >= confidence:
            j_best = j
        else:
            break
    return med, xs[j_best - 1], xs[n - j_best]


def _median_sorted(xs: Sequence[float]) -> float:
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100), linear interpolation between order statistics."""
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("percentile needs at least one value")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


# --- two-sample tests for CI verdicts (used by greenbench.compare) --------------------------------
#
# Why our own Mann–Whitney distribution instead of scipy.stats.mannwhitneyu(method="exact"): scipy's
# exact method ignores ties ("No correction is made for ties"), and energy estimates rounded to a
# counter's resolution do tie. We compute the exact permutation distribution of the rank sum
# conditional on the observed (mid)ranks, which is exact with or without ties, and cache it: with
# no ties it depends only on (n, m), so repeated verdicts reuse one table.

_EXACT_MAX_N = 150  # pooled size up to which the exact distribution is computed


def mannwhitney_greater(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mann–Whitney U of ``a`` over ``b`` and its one-sided p-value for H1: a tends to be larger.

    U counts pairs (a_i, b_j) with a_i > b_j, ties counting ½. The p-value is P(U ≥ U_obs) under
    H0 (both samples from one distribution), from the exact permutation distribution given the
    pooled midranks (exact with ties) for pooled size ≤ 150, else the tie-corrected normal
    approximation with continuity correction.
    """
    np, sps = _numpy(), _scipy_stats()
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    n, m = len(xa), len(xb)
    if n == 0 or m == 0:
        raise ValueError("mannwhitney_greater needs at least one value on each side")
    pooled = np.concatenate([xa, xb])
    doubled_ranks = np.rint(2.0 * sps.rankdata(pooled)).astype(np.int64)  # midranks × 2: ints
    u = float(doubled_ranks[:n].sum() / 2.0 - n * (n + 1) / 2.0)
    if n + m > _EXACT_MAX_N:
        res = sps.mannwhitneyu(xa, xb, alternative="greater", method="asymptotic")
        return u, float(res.pvalue)
    tail = _rank_sum_tail(n, tuple(sorted(doubled_ranks.tolist())))
    observed = int(doubled_ranks[:n].sum())
    return u, float(min(1.0, tail[observed]))


@functools.lru_cache(maxsize=128)
def _rank_sum_tail(n: int, scores: tuple[int, ...]) -> np.ndarray:
    """P(sum of n scores drawn without replacement from ``scores`` ≥ s), indexed by s."""
    np = _numpy()
    total = sum(sorted(scores)[-n:])
    # ways[k, s]: number of k-subsets of the scores seen so far whose sum is s (float: C(150, 75)
    # ≈ 9e43 overflows int64 but not float64; relative precision is all a p-value needs)
    ways = np.zeros((n + 1, total + 1))
    ways[0, 0] = 1.0
    for v in scores:
        ways[1:, v:] += ways[:-1, : total + 1 - v].copy()
    dist = ways[n] / ways[n].sum()
    tail = np.cumsum(dist[::-1])[::-1]
    tail.setflags(write=False)
    return tail


def min_p_value(n: int, m: int) -> float:
    """Smallest one-sided p an exact rank test on n vs m values can give: 1 / C(n+m, n)."""
    if n <= 0 or m <= 0:
        return 1.0
    return 1.0 / math.comb(n + m, n)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1); NaN stays NaN.

    A hypothesis is rejected at family-wise level α when its adjusted p-value is < α. NaNs are
    not counted in the family size.
    """
    ps = [float(p) for p in pvalues]
    idx = sorted((i for i, p in enumerate(ps) if not math.isnan(p)), key=lambda i: ps[i])
    k = len(idx)
    out = [math.nan] * len(ps)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (k - rank) * ps[i]))
        out[i] = running
    return out


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof 1) over |mean|; NaN for fewer than 2 values or mean 0."""
    np = _numpy()
    xs = np.asarray(values, dtype=float)
    if len(xs) < 2:
        return math.nan
    mean = float(xs.mean())
    if mean == 0.0:
        return math.nan
    return float(xs.std(ddof=1) / abs(mean))


def log_t_prediction(history: Sequence[float], new: float) -> tuple[float, float]:
    """One-sided test of a new positive value against a history, on log values.

    Treats log(history) as a normal sample (mean μ̂, sd s, k values) and returns
    ``(t, p_greater)`` where t = (log new − μ̂) / (s·√(1 + 1/k)) follows Student's t with k − 1
    degrees of freedom if the new value comes from the same distribution, and p_greater is
    P(T ≥ t): the new value lies above the one-sided (1 − p) prediction bound. Use
    1 − p_greater for "the new value is lower".
    """
    np = _numpy()
    logs = np.log(np.asarray(history, dtype=float))
    k = len(logs)
    if k < 2:
        raise ValueError("a prediction interval needs at least two history values")
    if new <= 0 or not np.all(np.isfinite(logs)):
        raise ValueError("log prediction intervals need positive values")
    mu = float(logs.mean())
    s = float(logs.std(ddof=1))
    diff = math.log(new) - mu
    if s == 0.0:  # a constant history: any difference is infinitely many spreads away
        if diff == 0.0:
            return 0.0, 0.5
        return math.copysign(math.inf, diff), 0.0 if diff > 0 else 1.0
    t = diff / (s * math.sqrt(1.0 + 1.0 / k))
    return t, float(_scipy_stats().t.sf(t, k - 1))


def log_prediction_bound(history: Sequence[float], confidence: float = 0.99) -> float:
    """Upper one-sided prediction bound (original units) for one new value, from log values."""
    np = _numpy()
    logs = np.log(np.asarray(history, dtype=float))
    k = len(logs)
    if k < 2:
        raise ValueError("a prediction interval needs at least two history values")
    q = float(_scipy_stats().t.ppf(confidence, k - 1))
    return math.exp(float(logs.mean()) + q * float(logs.std(ddof=1)) * math.sqrt(1.0 + 1.0 / k))
