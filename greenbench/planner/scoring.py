"""How good the planner's predictions are against measurements: errors, rank correlation,
regret.

* error: ``predicted / measured − 1``; a set of them is summarised by the median of their
  absolute values;
* rank correlation: Spearman's ρ (`scipy.stats.spearmanr`) of predicted against measured step
  times: 1 when the planner orders the layouts as they measured, whatever its absolute error;
* regret of a pick among K layouts run: ``measured time of the planner's first pick / best
  measured time among the K − 1``: 0 when its first pick was the fastest of them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from scipy.stats import spearmanr

from greenbench.errors import SpecError


def relative_error(predicted: float, measured: float | None) -> float | None:
    """``predicted / measured − 1``, None without a positive measurement."""
    return predicted / measured - 1 if measured else None


def median_abs(errors: Iterable[float | None]) -> float | None:
    """Median of the absolute errors given (None ones passed over); None when there are none."""
    values = [abs(e) for e in errors if e is not None]
    return statistics.median(values) if values else None


def spearman(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    """Spearman's rank correlation of ``predicted`` against ``measured`` (pairs in the same
    order); None with fewer than three pairs or when either side is constant."""
    if len(predicted) != len(measured):
        raise ValueError(f"{len(predicted)} predictions against {len(measured)} measurements")
    if len(predicted) < 3 or len(set(predicted)) < 2 or len(set(measured)) < 2:
        return None
    rho = float(spearmanr(predicted, measured).statistic)
    return None if math.isnan(rho) else rho


def regret(measured_in_plan_order: Sequence[float | None]) -> float | None:
    """``measured[0] / min(measured) − 1`` over the layouts the planner ranked first to K-th
    (None: a run that measured nothing, passed over); None when the first pick measured
    nothing."""
    if not measured_in_plan_order:
        raise SpecError("regret needs at least one layout run")
    first = measured_in_plan_order[0]
    if first is None:
        return None
    return first / min(t for t in measured_in_plan_order if t is not None) - 1
