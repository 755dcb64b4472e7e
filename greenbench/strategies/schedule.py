"""Step schedules: how a strategy runs one optimizer step over its rank's microbatches.

`StepSchedule` is the shared template (zero the gradients; per microbatch, forward and loss
under the strategy's context, backward of the scaled loss; the optimizer step; the step's
seconds split by the communication recorded during it). Strategies adjust it through its hooks
(a context per microbatch, what happens before and after a minibatch, the loss scale, autocast)
or replace the step (a pipeline, a skip schedule), so every strategy is measured doing the same
arithmetic.

The template adds no synchronisation of its own: ranks meet only in the collectives and
messages of the strategy itself, as they do under its stock counterpart (DDP's bucket
all-reduces, FSDP2's all-gathers and reduce-scatters). How long a rank waited for the others is
read from those calls' records afterwards (`greenbench.distributed.comm`,
`greenbench.rank.window.settle_calls`). `barrier` is for a strategy whose own algorithm meets in
one (ODC, once per minibatch).

Loss normalisation: each microbatch contributes sum(token losses) / global_tokens, where
global_tokens counts the real tokens of the whole minibatch over all ranks. Data-parallel
gradient reduction that averages over ranks scales the local loss by the world size; the result
equals a single process training on the whole minibatch.

The rank's loop may pass ``before_microbatch``, called with each microbatch's index before it
runs (the loop's fault injection, `greenbench.rank.faults`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.distributed.device import DistContext, StepTimes, synchronize

if TYPE_CHECKING:
    from greenbench.data.batches import StepBatch
    from greenbench.sources.contract import Loss

#: called with a microbatch's index before it runs
BeforeMicrobatch = Callable[[int], None]


def step_times(comm: CommRecorder, mark: int, total_s: float) -> StepTimes:
    """A step of ``total_s`` seconds split by the calls recorded since ``mark``: on CUDA, where
    calls are timed by events read after the window, the whole step is compute here and the
    window's records split it afterwards."""
    calls = [c for c in comm.since(mark) if c.events is None]
    times = StepTimes()
    times.wait_s = math.fsum(c.seconds for c in calls if c.waits)
    times.comm_s = math.fsum(c.seconds for c in calls if not c.waits)
    times.compute_s = total_s - times.wait_s - times.comm_s
    return times


def barrier(ctx: DistContext, comm: CommRecorder) -> float:
    """Meet the other ranks (recorded as waiting on the world group); return the seconds. Only
    for a strategy whose algorithm has a barrier; the shared template never calls it."""
    if not ctx.distributed:
        return 0.0
    import torch.distributed as dist

    synchronize(ctx.device)
    t0 = time.perf_counter()
    dist.barrier()
    seconds = time.perf_counter() - t0
    comm.add("world", "barrier", 0, seconds, waits=True)
    return seconds


class StepSchedule:
    """Forward and backward over a rank's microbatches, then the optimizer step."""

    def __init__(self, ctx: DistContext, comm: CommRecorder, loss: Loss) -> None:
        self.ctx = ctx
        self.comm = comm
        self.loss = loss

    def train_step(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: StepBatch,
        before_microbatch: BeforeMicrobatch | None = None,
    ) -> tuple[float, StepTimes]:
        """One optimizer step over this rank's microbatches; returns (summed loss, times)."""
        mark = self.comm.mark()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = self.forward_backward(model, batch, before_microbatch)
        optimizer.step()
        synchronize(self.ctx.device)
        return float(loss_sum), step_times(self.comm, mark, time.perf_counter() - start)

    def forward_backward(
        self,
        model: torch.nn.Module,
        batch: StepBatch,
        before_microbatch: BeforeMicrobatch | None = None,
    ) -> torch.Tensor:
        """Forward and backward of this rank's microbatches, gradients accumulated; returns the
        summed (unscaled) loss."""
        scale = self.loss_scale(batch.global_tokens)
        loss_sum = torch.zeros((), device=self.ctx.device)
        count = len(batch.microbatches)
        self.start_minibatch()
        for i, mb in enumerate(batch.microbatches):
            if before_microbatch is not None:
                before_microbatch(i)
            with self.microbatch(model, last=i == count - 1):
                loss = self.microbatch_loss(model, mb)
                (loss * scale).backward()
            loss_sum += loss.detach()
        self.finish_minibatch()
        return loss_sum

    def evaluate(self, model: torch.nn.Module, batch: StepBatch) -> tuple[float, int]:
        """The whole model's summed next-token loss over the whole held-out set, and that set's
        real tokens, the same on every rank; ``batch`` is this rank's part of the set as the
        strategy's assignment gives it. No gradients, no optimizer step; what it communicates
        is recorded like any call (the worker drops it before the next training window).

        The models have no dropout, so evaluation runs in training mode (``model.eval()``
        would switch Hugging Face's Mamba to its caching inference path). This template runs
        every microbatch's forward and adds the ranks' sums (`reduce_eval`); strategies whose
        ranks hold parts of the model or of the sequence override it."""
        with torch.no_grad():
            loss_sum = torch.zeros((), device=self.ctx.device, dtype=torch.float64)
            for mb in batch.microbatches:
                loss_sum += self.microbatch_loss(model, mb).double()
            loss_sum = self.reduce_eval(loss_sum)
        return float(loss_sum), batch.global_tokens

    def reduce_eval(self, loss_sum: torch.Tensor) -> torch.Tensor:
        """Add this rank's part of the held-out loss to the other ranks' (the world is data
        parallel here: every rank evaluated its own share of the set with the whole model).
        A strategy whose ranks share a part passes zero from all of them but one."""
        if not self.ctx.distributed:
            return loss_sum
        import torch.distributed as dist

        with self.comm.span("world", "all_reduce", tensor_bytes(loss_sum)):
            dist.all_reduce(loss_sum)
        return loss_sum

    def microbatch_loss(self, model: torch.nn.Module, mb: Any) -> torch.Tensor:
        """The workload's summed loss of one microbatch."""
        return self.loss(model, mb, self.ctx.device, self.autocast)

    @contextlib.contextmanager
    def microbatch(self, model: torch.nn.Module, last: bool) -> Iterator[None]:
        """Context for one microbatch's forward+backward (e.g. skip gradient sync)."""
        yield

    def start_minibatch(self) -> None:
        """Before a minibatch's first microbatch (after the gradients were zeroed)."""
        return None

    def finish_minibatch(self) -> None:
        """After a minibatch's last microbatch, before the optimizer step."""
        return None

    def loss_scale(self, global_tokens: int) -> float:
        return 1.0 / global_tokens

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast to the run's precision (nothing in float32)."""
        if self.ctx.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.ctx.device.type, dtype=self.ctx.dtype)
