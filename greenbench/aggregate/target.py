"""A repeat's and a run's figures to a target loss (``train.until = target``), from the ranks'
`TargetOutcome`s: the rules are `greenbench.aggregate`'s (its module docstring, "A run to a
target loss")."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from greenbench.results import RankResult, TargetOutcome, ValPoint
from greenbench.vocabulary import TARGET_FIGURES


def _known_sum(values: Sequence[float | None]) -> float | None:
    """The sum, or None when any value is unknown (never a partial sum passed off as whole)."""
    return None if any(v is None for v in values) else math.fsum(v for v in values if v is not None)


def _curve(ranks: Sequence[RankResult], outcomes: Sequence[TargetOutcome]) -> tuple[ValPoint, ...]:
    """The validation curve over the ranks (`greenbench.aggregate`); ranks whose curves
    disagree on their steps or losses are mixed results, refused."""
    first = outcomes[0].curve
    for outcome in outcomes[1:]:
        if [(p.step, p.val_loss) for p in outcome.curve] != [(p.step, p.val_loss) for p in first]:
            raise ValueError("ranks report different validation curves (steps or losses)")
    metered = [i for i, r in enumerate(ranks) if r.energy is not None]
    return tuple(
        ValPoint(
            step=point.step,
            tokens=max(o.curve[k].tokens for o in outcomes),
            seconds=max(o.curve[k].seconds for o in outcomes),
            joules=_known_sum([outcomes[i].curve[k].joules for i in metered]) if metered else None,
            val_loss=point.val_loss,
        )
        for k, point in enumerate(first)
    )


def repeat_target(
    ranks: Sequence[RankResult],
    *,
    tokens: int,
    seconds: float,
    energy_j: float | None,
    energy_net_j: float | None,
) -> dict[str, Any]:
    """A repeat's figures of a run to a target loss (`RepeatResult`'s fields, its validation
    curve among them) from its ranks and its own ``tokens``, ``seconds`` and energy; empty for
    a window run. Ranks that disagree on the target, the outcome or the steps are refused."""
    outcomes = [r.target for r in ranks if r.target is not None]
    if not outcomes:
        return {}
    if len(outcomes) != len(ranks):
        raise ValueError("some ranks report a run to a target and others do not")
    first = outcomes[0]
    if any((o.target_loss, o.reached, o.steps) != (first.target_loss, first.reached, first.steps)
           for o in outcomes):  # fmt: skip
        raise ValueError("ranks report different targets, outcomes or step counts")
    reached = all(o.reached for o in outcomes)
    metered = [o for r, o in zip(ranks, outcomes, strict=True) if r.energy is not None]
    return {
        "target_loss": first.target_loss,
        "target_reached": reached,
        "steps_to_target": first.steps if reached else None,
        "tokens_to_target": tokens if reached else None,
        "seconds_to_target": seconds if reached else None,
        "energy_to_target_j": energy_j if reached else None,
        "energy_to_target_net_j": energy_net_j if reached else None,
        "best_val_loss": min(o.best_val_loss for o in outcomes),
        "target_stopped_by": first.stopped_by,
        "eval_s": max(o.eval_s for o in outcomes),
        "eval_energy_j": _known_sum([o.eval_energy_j for o in metered]) if metered else None,
        "val_curve": _curve(ranks, outcomes),
    }


def target_medians(
    repeats: Iterable[Any], figures: Sequence[str] = TARGET_FIGURES
) -> dict[str, Any]:
    """The median of each figure to target over a run's repeats (objects or mappings carrying it
    and ``target_reached``), a repeat that did not reach the target counting as above every one
    that did (it took more than its budget); None where that leaves the median unknown (it falls
    on a repeat that did not reach, or half of an even count do not) or no repeat has the figure.
    Also ``best_val_loss``'s plain median, and ``n_reached`` of ``n_to_target`` repeats to a
    target. The store's `list_runs` gives the same medians."""
    rows = [r for r in repeats if _value(r, "target_reached") is not None]
    out: dict[str, Any] = {
        "n_to_target": len(rows),
        "n_reached": sum(bool(_value(r, "target_reached")) for r in rows),
    }
    for name in figures:
        xs = []
        for r in rows:
            value = _value(r, name)
            if not _value(r, "target_reached"):
                xs.append(math.inf)  # more than its budget: above every repeat that reached
            elif value is not None:  # reached, the figure unknown (a meter): left out
                xs.append(float(value))
        med = _median(xs)
        out[name] = None if med is None or math.isinf(med) or math.isnan(med) else med
    out["best_val_loss"] = _median(
        [float(v) for r in rows if (v := _value(r, "best_val_loss")) is not None]
    )
    return out


def _value(row: Any, name: str) -> Any:
    value = row.get(name) if isinstance(row, dict) else getattr(row, name, None)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _median(xs: list[float]) -> float | None:
    """The median as the store's ``median`` gives it (the mean of the middle two)."""
    xs = sorted(xs)
    mid = len(xs) // 2
    return None if not xs else xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
