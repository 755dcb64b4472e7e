"""Data-assignment policies: which part of each optimizer step's minibatch a rank trains on.

Data-parallel ranks each train their own share (`DataParallelShare`: share ``index`` of
``parts``), and every rank of one data-parallel index (tensor, pipeline and context parallel
ranks) the same one; a skip schedule's nodes each draw the whole minibatch and route its
microbatches themselves (`WholeMinibatch`). How a minibatch is cut into shares, by count or by
cost, is the run's ``data.balance`` (a strategy's card names its default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from greenbench.data.batches import StepBatch
    from greenbench.sources.contract import BatchSource


class DataAssignment(Protocol):
    """What this rank trains on in optimizer step ``step``."""

    def batch(self, batches: BatchSource, step: int) -> StepBatch: ...


@dataclass(frozen=True, slots=True)
class DataParallelShare:
    """Share ``index`` of ``parts`` of every minibatch."""

    index: int
    parts: int

    def batch(self, batches: BatchSource, step: int) -> StepBatch:
        return batches.part(step, self.index, self.parts)


@dataclass(frozen=True, slots=True)
class WholeMinibatch:
    """The whole minibatch, on every rank."""

    def batch(self, batches: BatchSource, step: int) -> StepBatch:
        return batches.part(step, 0, 1)
