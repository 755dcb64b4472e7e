"""The tally of one measured window: what the worker adds up per step, kept cheap.

Everything here runs inside the measured window, so it is plain arithmetic on numbers the step
already produced (batch shapes, token counts, clock readings); `benchmarks/step_time.py` times it
against the training step it accompanies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from greenbench.data.batches import StepBatch
    from greenbench.models import ModelInfo
    from greenbench.strategies.base import StepTimes


def batch_flops(info: ModelInfo, batch: StepBatch) -> float:
    """Analytic model FLOPs of one optimizer step over this rank's microbatches."""
    from greenbench.models.flops import flops_per_token

    return sum(
        mb.n_tokens * flops_per_token(info, mb.input_ids.shape[1]) for mb in batch.microbatches
    )


@dataclass(slots=True)
class WindowTally:
    """Running sums over the steps of one window."""

    step_times_s: list[float] = field(default_factory=list)
    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0
    loss_sum: float = 0.0
    tokens: int = 0
    flops: float = 0.0
    n_microbatches: int = 0

    def add(
        self, step_s: float, times: StepTimes, loss_sum: float, batch: StepBatch, flops: float
    ) -> None:
        self.step_times_s.append(step_s)
        self.compute_s += times.compute_s
        self.comm_s += times.comm_s
        self.wait_s += times.wait_s
        self.loss_sum += loss_sum
        self.tokens += batch.n_tokens
        self.flops += flops
        self.n_microbatches += len(batch.microbatches)

    @property
    def mean_loss(self) -> float:
        return self.loss_sum / max(self.tokens, 1)


def split_blocked(per_rank: list[list[float]]) -> list[tuple[float, float]]:
    """Split each rank's time blocked in collectives into (transfer, waiting) seconds.

    ``per_rank[r][i]`` is how long rank r was blocked in its i-th collective; every rank issues
    the same collectives in the same order. The last rank to arrive at a collective waits for
    no one, so the shortest of the ranks' times is the transfer and what each rank spent beyond
    it is waiting for the others. If the ranks' sequences differ in length (they should not),
    every second counts as transfer: waiting is never invented.
    """
    if not per_rank:
        return []
    if len({len(times) for times in per_rank}) != 1:
        return [(math.fsum(times), 0.0) for times in per_rank]
    floors = [min(call) for call in zip(*per_rank, strict=True)]
    return [
        (math.fsum(floors), math.fsum(t - f for t, f in zip(times, floors, strict=True)))
        for times in per_rank
    ]
