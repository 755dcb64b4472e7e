"""The tally of one measured window: what the worker adds up per step, kept cheap.

Everything here runs inside the measured window, so it is plain arithmetic on numbers the step
already produced (batch shapes, token counts, clock readings); `benchmarks/step_time.py` times it
against the training step it accompanies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from greenbench.distributed.comm import POINT_TO_POINT_OPS
from greenbench.results import CommRecord

if TYPE_CHECKING:
    from greenbench.data.batches import StepBatch
    from greenbench.distributed.device import StepTimes


@dataclass(slots=True)
class WindowTally:
    """Running sums over the steps of one window."""

    step_times_s: list[float] = field(default_factory=list)
    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0
    loss_sum: float = 0.0
    tokens: int = 0
    flops: float = 0.0  # PaLM's convention
    flops_causal: float | None = 0.0  # the causal convention; None once a step's is unknown
    n_microbatches: int = 0
    useful_tokens: float = 0.0
    #: why waiting inside collectives is unknown ("" when it is known: `unsplit_note`)
    comm_note: str = ""

    def add(
        self,
        step_s: float,
        times: StepTimes,
        loss_sum: float,
        batch: StepBatch,
        flops: float,
        flops_causal: float | None = None,
        *,
        counted: bool = True,
        share: float = 1.0,
    ) -> None:
        """Add one step, its FLOPs under PaLM's convention and the causal one (None: unknown,
        and so the window's); ``counted`` False keeps its tokens, FLOPs and loss out of the sums
        (another rank counts the same tokens: `Strategy.counts_tokens`); ``share`` is the part
        of the step's (token, block) work its paths ran (`Strategy.flops_fraction`), its tokens
        × it counting as useful."""
        self.step_times_s.append(step_s)
        self.compute_s += times.compute_s
        self.comm_s += times.comm_s
        self.wait_s += times.wait_s
        self.n_microbatches += len(batch.microbatches)
        if counted:
            self.loss_sum += loss_sum
            self.tokens += batch.n_tokens
            self.useful_tokens += batch.n_tokens * share
            self.flops += flops
            if self.flops_causal is not None and flops_causal is not None:
                self.flops_causal += flops_causal
            else:
                self.flops_causal = None

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


def settle_calls(
    per_rank: list[list[tuple[str, str, int, float, bool]]], rank: int
) -> tuple[list[CommRecord], float, float]:
    """This rank's communication records for a window, and its transfer and waiting seconds.

    ``per_rank[r]`` lists rank r's calls in issue order as (dim, op, bytes, seconds, waits).
    Calls that ``waits`` (pipeline receives, ODC's barriers) are waiting through and through;
    point-to-point calls (`POINT_TO_POINT_OPS`) are transfer through and through. Collectives
    are split as in `split_blocked` (the shortest of the ranks' times for a call is transfer,
    the rest waiting) when every rank issued the same sequence of them, as collectives are;
    otherwise they count as transfer (waiting is never invented) and `unsplit_note` says the
    waiting is unknown.
    """
    blocking = [[c for c in calls if collective(c)] for calls in per_rank]
    aligned = collectives_aligned(per_rank)
    floors = (
        [min(times) for times in zip(*([c[3] for c in calls] for calls in blocking), strict=True)]
        if aligned
        else []
    )
    groups: dict[tuple[str, str], tuple[int, int, float, float]] = {}
    transfer = waiting = 0.0
    k = 0
    for dim, op, nbytes, seconds, waits in per_rank[rank]:
        if waits:
            waited = seconds
        elif op in POINT_TO_POINT_OPS:
            waited = 0.0
        else:
            waited = seconds - floors[k] if aligned else 0.0
            k += 1
        transfer += seconds - waited
        waiting += waited
        calls, moved, total, waited_sum = groups.get((dim, op), (0, 0, 0.0, 0.0))
        groups[(dim, op)] = (calls + 1, moved + nbytes, total + seconds, waited_sum + waited)
    records = [CommRecord(dim, op, *totals) for (dim, op), totals in groups.items()]
    return records, transfer, waiting


def collectives_aligned(per_rank: list[list[tuple[str, str, int, float, bool]]]) -> bool:
    """Whether every rank issued the same sequence of collectives (dimension and operation),
    so that each call can be split into transfer and waiting (`settle_calls`)."""
    sequences = {tuple((c[0], c[1]) for c in calls if collective(c)) for calls in per_rank}
    return len(sequences) == 1


def unsplit_note(per_rank: list[list[tuple[str, str, int, float, bool]]]) -> str:
    """Why the window's waiting leaves its collectives out ("" when they were split): ranks
    that issued different sequences of collectives cannot be matched call by call, so their
    seconds count as transfer and the stored waiting holds only what was recorded as waiting
    (barriers, pipeline receives)."""
    if collectives_aligned(per_rank):
        return ""
    counts = sorted({sum(1 for c in calls if collective(c)) for calls in per_rank})
    return (
        "waiting inside collectives unknown: ranks issued different collectives "
        f"({'/'.join(map(str, counts))} calls), counted as transfer"
    )


def collective(call: tuple[str, str, int, float, bool]) -> bool:
    """Whether a settled call is a collective (neither a wait nor a point-to-point call)."""
    return not call[4] and call[1] not in POINT_TO_POINT_OPS
