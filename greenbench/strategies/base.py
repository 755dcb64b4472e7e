"""The interface every parallel strategy implements, and the shared training step.

A strategy wraps a model for its layout and decides, per microbatch, whether gradients are
synchronised. The step itself (forward, loss over the whole minibatch's tokens, backward,
optimizer) is shared so that every strategy is measured doing the same arithmetic.

Loss normalisation: each microbatch contributes sum(token losses) / global_tokens, where
global_tokens counts the real tokens of the whole minibatch over all ranks. Data-parallel
gradient reduction averages over ranks, so the local loss is scaled by world_size; the result
equals a single process training on the whole minibatch.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from greenbench.data.batches import Microbatch, StepBatch
    from greenbench.spec import RunSpec


@dataclass(frozen=True, slots=True)
class DistContext:
    """Where this rank runs."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    dtype: torch.dtype  # autocast dtype; float32 means no autocast

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


@dataclass(slots=True)
class StepTimes:
    """Seconds one rank spent in one step, split by what it was doing."""

    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (a no-op on CPU) before reading a clock or a counter."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Strategy(ABC):
    """A way of spreading training over ranks. Register subclasses in ``STRATEGIES``."""

    name: ClassVar[str]

    def __init__(self, ctx: DistContext) -> None:
        self.ctx = ctx
        #: seconds this rank spent blocked in each timed collective, in issue order (strategies
        #: whose collectives are synchronous here append to it; see `take_collective_times`)
        self.collective_s: list[float] = []

    def take_collective_times(self) -> list[float]:
        """The timed collectives since the last call, in order; the list starts anew."""
        out = list(self.collective_s)
        self.collective_s.clear()  # in place: timed collectives hold a reference to this list
        return out

    @classmethod
    def validate(cls, spec: RunSpec) -> None:
        """Raise SpecError for a setting this strategy cannot run (none by default)."""
        return None

    @abstractmethod
    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Return the model prepared for this layout (moved to the device by the caller)."""

    @contextlib.contextmanager
    def microbatch(self, model: torch.nn.Module, last: bool) -> Iterator[None]:
        """Context for one microbatch's forward+backward (e.g. skip gradient sync)."""
        yield

    def wait_point(self, index: int, count: int) -> bool:
        """Whether ranks meet before microbatch ``index`` (a timed barrier = waiting time)."""
        return False

    def loss_scale(self, global_tokens: int) -> float:
        return 1.0 / global_tokens

    def train_step(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: StepBatch,
    ) -> tuple[float, StepTimes]:
        """One optimizer step over this rank's microbatches; returns (summed loss, times)."""
        times = StepTimes()
        device = self.ctx.device
        timed_before = len(self.collective_s)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        scale = self.loss_scale(batch.global_tokens)
        loss_sum = torch.zeros((), device=device)
        count = len(batch.microbatches)
        for i, mb in enumerate(batch.microbatches):
            if self.wait_point(i, count):
                times.wait_s += self.barrier()
            with self.microbatch(model, last=i == count - 1):
                loss = self.microbatch_loss(model, mb)
                (loss * scale).backward()
            loss_sum += loss.detach()
        if self.wait_point(count, count):
            times.wait_s += self.barrier()
        optimizer.step()
        synchronize(device)
        total = time.perf_counter() - start
        # time blocked in collectives, split into transfer and waiting after the window
        times.comm_s = math.fsum(self.collective_s[timed_before:])
        times.compute_s = total - times.wait_s - times.comm_s
        return float(loss_sum), times

    def microbatch_loss(self, model: torch.nn.Module, mb: Microbatch) -> torch.Tensor:
        """Sum of next-token cross-entropies over the real tokens of one microbatch."""
        device = self.ctx.device
        input_ids = mb.input_ids.to(device, non_blocking=True)
        labels = mb.labels.to(device, non_blocking=True)
        position_ids = mb.position_ids.to(device, non_blocking=True)
        autocast = (
            torch.autocast(device.type, dtype=self.ctx.dtype)
            if self.ctx.dtype != torch.float32
            else contextlib.nullcontext()
        )
        with autocast:
            logits = forward_logits(model, input_ids, position_ids)
        return F.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(),
            labels[:, 1:].flatten(),
            ignore_index=-100,
            reduction="sum",
        )

    def barrier(self) -> float:
        """Meet the other ranks; return the seconds spent waiting."""
        if not self.ctx.distributed:
            return 0.0
        import torch.distributed as dist

        synchronize(self.ctx.device)
        t0 = time.perf_counter()
        dist.barrier()
        return time.perf_counter() - t0


def forward_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor
) -> torch.Tensor:
    """Logits of a Hugging Face causal LM; position ids go only to models that take them
    (Llama does, so packed documents restart their positions; Mamba has none)."""
    if takes_position_ids(type(getattr(model, "module", model))):
        return model(input_ids=input_ids, position_ids=position_ids).logits
    return model(input_ids=input_ids).logits


@functools.cache
def takes_position_ids(cls: type) -> bool:
    return "position_ids" in inspect.signature(cls.forward).parameters
