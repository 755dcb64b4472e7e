"""The checkpoint interval that wastes least, by Young's and Daly's models, from measured costs.

A run that checkpoints every τ seconds of training and fails on average every M seconds (its
mean time between failures) loses, per second, the checkpoints' cost δ/τ (δ: the seconds
training waits for one checkpoint) and, per failure, the restart R and the work since the last
checkpoint, τ/2 on average: the expected waste fraction is

    W(τ) = δ/τ + (τ/2 + R)/M                                             (`waste_fraction`)

Young (1974) minimises it to first order: τ* = sqrt(2·δ·M) (`young_interval`). Daly (2006)
keeps the higher-order terms: τ* = sqrt(2δM)·[1 + (1/3)·sqrt(δ/(2M)) + δ/(9·2M)] − δ while
δ < 2M, else M (`daly_interval`): checkpoints cost so much that one per failure is best.

Every figure here is in seconds of wall clock; `Optimum` converts the intervals to measured
steps with the seconds a step takes. The functions are pure: the report's section, the
dashboard, the benchmark and the tests all compute with them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def _check(delta_s: float, mtbf_s: float) -> None:
    if not (delta_s >= 0 and math.isfinite(delta_s)):
        raise ValueError(f"checkpoint cost must be a finite number >= 0 s, got {delta_s!r}")
    if not (mtbf_s > 0):
        raise ValueError(f"the mean time between failures must be > 0 s, got {mtbf_s!r}")


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young's optimum interval between checkpoints, sqrt(2·δ·M) seconds, from the seconds a
    checkpoint costs (``delta_s``) and the mean seconds between failures (``mtbf_s``; +∞:
    failures never happen, and so checkpoints never pay)."""
    _check(delta_s, mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum, sqrt(2δM)·[1 + (1/3)·sqrt(δ/(2M)) + δ/(9·2M)] − δ seconds
    where δ < 2M; M where checkpoints cost that much (one per failure is then best)."""
    _check(delta_s, mtbf_s)
    if math.isinf(mtbf_s):
        return math.inf
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def waste_fraction(tau_s: float, delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """The expected share of time wasted checkpointing every ``tau_s`` seconds: δ/τ for the
    checkpoints, (τ/2 + R)/M for the failures (half an interval redone on average, and the
    restart ``restart_s``); first order, so it may pass 1 where τ or R nears M."""
    _check(delta_s, mtbf_s)
    if not tau_s > 0:
        raise ValueError(f"the checkpoint interval must be > 0 s, got {tau_s!r}")
    return delta_s / tau_s + (tau_s / 2.0 + restart_s) / mtbf_s


def waste_curve(
    taus_s: Sequence[float], delta_s: float, mtbf_s: float, restart_s: float
) -> list[float]:
    """`waste_fraction` at each interval of ``taus_s`` (the model's curve, for drawing)."""
    return [waste_fraction(t, delta_s, mtbf_s, restart_s) for t in taus_s]


@dataclass(frozen=True, slots=True)
class Optimum:
    """The optimum checkpoint interval of a run from its measured costs.

    ``delta_s``: seconds training waited per checkpoint; ``mtbf_s``: seconds per failure;
    ``restart_s``: seconds per restart; ``step_s``: seconds of a measured step (without its
    checkpoint): each interval in seconds (``young_s``, ``daly_s``) and in steps
    (``young_steps``, ``daly_steps``, not rounded)."""

    delta_s: float
    mtbf_s: float
    restart_s: float
    step_s: float

    @property
    def young_s(self) -> float:
        return young_interval(self.delta_s, self.mtbf_s)

    @property
    def daly_s(self) -> float:
        return daly_interval(self.delta_s, self.mtbf_s)

    @property
    def young_steps(self) -> float:
        return self.young_s / self.step_s

    @property
    def daly_steps(self) -> float:
        return self.daly_s / self.step_s

    def waste(self, every_steps: float) -> float:
        """The model's waste fraction checkpointing every ``every_steps`` measured steps."""
        return waste_fraction(every_steps * self.step_s, self.delta_s, self.mtbf_s, self.restart_s)

    @classmethod
    def measured(
        cls,
        ckpt_s: float,
        ckpt_count: int,
        seconds: float,
        failures: int,
        restart_s: float,
        step_s: float,
    ) -> Optimum | None:
        """From a run's figures: δ = ``ckpt_s`` ÷ ``ckpt_count``, M = ``seconds`` ÷
        ``failures`` (the rate the run saw: an injected failure's, not a machine's), R =
        ``restart_s`` ÷ ``failures``; None where one of them cannot be computed (no checkpoint,
        no failure, a step of no time)."""
        values = (ckpt_s, seconds, restart_s, step_s)
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            return None
        if not ckpt_count or not failures or ckpt_count < 0 or failures < 0:
            return None
        if step_s <= 0 or seconds <= 0 or ckpt_s < 0 or restart_s < 0:
            return None
        return cls(ckpt_s / ckpt_count, seconds / failures, restart_s / failures, step_s)


__all__ = ["Optimum", "daly_interval", "waste_curve", "waste_fraction", "young_interval"]
