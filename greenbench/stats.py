"""Small, pure statistics used across greenbench (summaries, CI verdicts, the dashboard).

Distribution-free where it can be: benchmark timings and energies are skewed and have outliers,
so medians with order-statistic confidence intervals are reported rather than means ± σ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats as _sps


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
        coverage = 1.0 - 2.0 * float(_sps.binom.cdf(j - 1, n, 0.5))
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
