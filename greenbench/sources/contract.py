"""The contract every workload keeps on a rank, greenbench's own and a user's alike: a model
source, a batch source, a loss, and the FLOPs of a step (`TrainingWorkload`).

- the **model source** builds the model, seeded, on the rank's device, and names its repeated
  blocks (what FSDP shards one by one and a pipeline cuts between);
- the **batch source** gives part ``index`` of ``parts`` of an optimizer step's minibatch, as a
  `greenbench.data.StepBatch` of microbatches (each with its real tokens, ``n_tokens``), and
  the minibatch's tokens over all parts (``global_tokens``);
- the **loss** is the sum of one microbatch's token losses (the strategies' step divides it by
  the minibatch's tokens, so every strategy trains on the same quantity a single process does);
- the **held-out set** (optional): a batch source of documents training never sees, on which a
  run to a target loss is evaluated;
- the **FLOPs** of a step are known beforehand or counted over the first warm-up step, under
  PaLM's convention and, where known, the causal one (`greenbench.vocabulary.flops`).

Which rank trains which part is the strategy's (`greenbench.strategies.assignment`); how a
microbatch's forward and backward run is the strategy's step schedule
(`greenbench.strategies.schedule`). Only the loss looks inside a microbatch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from greenbench.data.batches import StepBatch

#: what a loss receives to run its forward under the run's precision
Autocast = Callable[[], contextlib.AbstractContextManager[Any]]


class ModelSource(Protocol):
    """Builds the model (seeded, so every rank builds the same weights) and names its blocks."""

    def build(self, device: str | torch.device | None = None) -> torch.nn.Module: ...

    def blocks(self, model: torch.nn.Module) -> list[torch.nn.Module]: ...


class BatchSource(Protocol):
    """Part ``index`` of ``parts`` of optimizer step ``step``'s minibatch."""

    def part(self, step: int, index: int, parts: int) -> StepBatch: ...


class Loss(Protocol):
    """The summed loss of one microbatch's real tokens, its forward run under ``autocast``."""

    def __call__(
        self, model: torch.nn.Module, microbatch: Any, device: torch.device, autocast: Autocast
    ) -> torch.Tensor: ...


class StepFlops(Protocol):
    """The FLOPs of a step: ``of(batch)`` under PaLM's convention (full attention),
    ``causal_of(batch)`` under the causal one (None where unknown: `greenbench.vocabulary.flops`);
    ``counting(batch)`` wraps a warm-up step in which they are counted, where they are not known
    beforehand."""

    def of(self, batch: StepBatch) -> float: ...

    def causal_of(self, batch: StepBatch) -> float | None: ...

    def counting(self, batch: StepBatch) -> contextlib.AbstractContextManager[None]: ...


@dataclass(frozen=True, slots=True)
class TrainingWorkload:
    """What one rank trains: a model source, a batch source, a loss and a step's FLOPs."""

    model: ModelSource
    batches: BatchSource
    loss: Loss
    flops: StepFlops
    #: the held-out set a run to a target evaluates (every step of it the same documents,
    #: drawn from a stream training never draws from); None where the workload has none
    held_out: BatchSource | None = None
