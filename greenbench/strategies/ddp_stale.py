"""Bounded-staleness data parallelism (``ddp.staleness = s``): a rank applies averaged gradients
at most ``s`` steps old, so each step's all-reduce overlaps the next ``s`` steps' computation
instead of ending the step.

The model is replicated without ``DistributedDataParallel`` (its reducer all-reduces inside
backward and applies the result at once, which is staleness 0): the replicas start from rank
0's parameters and buffers, broadcast once (`replicate`), and stay identical because every rank
applies the same averaged gradients in the same order. A step (`StaleSchedule.train_step`):

1. forward and backward over the rank's microbatches with DDP's loss scale (the world size over
   the minibatch's tokens), so the ranks' average is the gradient of the global mean loss;
2. the gradients flattened into one buffer, divided by the world size, and all-reduced (a sum)
   asynchronously: gloo runs it on its own thread while this rank goes on;
3. the buffer joins a queue of reductions in flight; when more than ``s`` are in flight, the
   oldest is waited for, copied into the parameters' ``.grad`` and the optimizer steps. The
   update applied at step ``t`` is the average of step ``t - s``'s gradients.

The first ``s`` steps have no averaged gradient yet, so they take no optimizer step (the
parameters stay as initialised while the first reductions travel); the last ``s`` steps'
reductions are still in flight when training ends and are waited for, not applied (`close`).
``s = 0`` launches and waits at once: DDP's arithmetic (divide, sum, step), one buffer instead
of DDP's buckets.

Recorded: one ``all_reduce`` call on ``dp_replicate`` per reduction waited for, with the
buffer's bytes (the parameters' bytes) and the time the rank was blocked waiting for it, not
the time it overlapped computation. On CPU that is the wall clock around the wait; on CUDA the
wait makes the compute stream wait for NCCL's, and a CUDA event pair around it on the compute
stream times that stall (`greenbench.distributed.comm`). With an emulated link
(`greenbench.distributed.link`), each reduction completes only after the link's ring time for
its bytes, spent on a thread of its own in issue order (one link carries one reduction after
another), so staleness can hide it; the rank's blocked time is then read by the clock (after
synchronising the device on CUDA).

Why our own: torch has no bounded-staleness data parallelism (DDP's reducer always applies the
step's own gradients, and its communication hooks must return them to that step's backward).
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.distributed.device import DistContext, StepTimes, synchronize
from greenbench.distributed.link import EmulatedLink
from greenbench.strategies.ddp_hooks import DIM
from greenbench.strategies.schedule import BeforeMicrobatch, StepSchedule, step_times

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

    from greenbench.data.batches import StepBatch
    from greenbench.sources.contract import Loss


def replicate(module: torch.nn.Module, group: ProcessGroup | None) -> torch.nn.Module:
    """``module`` with the parameters and buffers of the group's first rank, as DDP's
    construction makes them, so that the replicas start equal (the gradients they apply are
    the same on every rank, so they stay equal). Not recorded: it is set-up, as DDP's is."""
    src = dist.get_global_rank(group, 0) if group is not None else 0
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.detach(), src=src, group=group)
    return module


@dataclass(slots=True)
class InFlight:
    """One step's all-reduce: its work, the buffer that holds the average once it completes,
    and (over an emulated link) the future that completes after the link's delay too."""

    work: Any
    buffer: torch.Tensor
    linked: Future[None] | None = None

    @property
    def nbytes(self) -> int:
        return tensor_bytes(self.buffer)


class StaleSchedule(StepSchedule):
    """A step that applies the averaged gradients of ``staleness`` steps before (see the
    module's docstring); `close` waits for the reductions still in flight."""

    def __init__(
        self,
        ctx: DistContext,
        comm: CommRecorder,
        loss: Loss,
        *,
        staleness: int,
        group: ProcessGroup | None = None,
        world: int | None = None,
        link: EmulatedLink | None = None,
    ) -> None:
        super().__init__(ctx, comm, loss)
        self.staleness = staleness
        self.group = group
        self.world = world if world is not None else ctx.world_size
        self.link = link if link is not None else EmulatedLink()
        self.in_flight: deque[InFlight] = deque()
        # the emulated link's delays, one reduction after another, off the compute thread
        self.link_thread = (
            ThreadPoolExecutor(1, thread_name_prefix="greenbench-link")
            if self.link.active
            else None
        )
        self.side_stream = torch.cuda.Stream(ctx.device) if ctx.device.type == "cuda" else None

    def train_step(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: StepBatch,
        before_microbatch: BeforeMicrobatch | None = None,
    ) -> tuple[float, StepTimes]:
        """Forward and backward, launch this step's all-reduce, and step with the one launched
        ``staleness`` steps before (no step while there is none yet)."""
        mark = self.comm.mark()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = self.forward_backward(model, batch, before_microbatch)
        params = [p for p in model.parameters() if p.requires_grad]
        self.in_flight.append(self.launch(params))
        if len(self.in_flight) > self.staleness:
            apply(params, self.wait(self.in_flight.popleft()))
            optimizer.step()
        synchronize(self.ctx.device)
        return float(loss_sum), step_times(self.comm, mark, time.perf_counter() - start)

    def loss_scale(self, global_tokens: int) -> float:
        # as DDP: the ranks' average is then sum / global_tokens
        return self.world / global_tokens

    def launch(self, params: list[torch.nn.Parameter]) -> InFlight:
        """Start the all-reduce of this step's gradients (divided by the world size, summed)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        buffer = torch.cat([g.reshape(-1) for g in grads]).div_(self.world)
        work = dist.all_reduce(buffer, group=self.group, async_op=True)
        item = InFlight(work, buffer)
        if self.link_thread is not None:
            item.linked = self.link_thread.submit(self.over_link, work, item.nbytes)
        return item

    def over_link(self, work: Any, nbytes: int) -> None:
        """On the link's thread: the real all-reduce's completion, then the link's ring time."""
        if self.side_stream is not None:  # NCCL's wait orders a stream: block on a side one
            with torch.cuda.stream(self.side_stream):
                work.wait()
            self.side_stream.synchronize()
        else:
            work.wait()
        self.link.delay(self.link.all_reduce_s(nbytes, self.world))

    def wait(self, item: InFlight) -> torch.Tensor:
        """Wait for ``item``'s reduction, recording the time this rank was blocked in it."""
        if item.linked is None:  # CPU: the clock around the wait; CUDA: the stream's stall
            with self.comm.span(DIM, "all_reduce", item.nbytes):
                item.work.wait()
        else:
            synchronize(self.ctx.device)  # what the device still computes is not waiting
            t0 = time.perf_counter()
            item.linked.result()
            self.comm.add(DIM, "all_reduce", item.nbytes, time.perf_counter() - t0)
        return item.buffer

    def close(self) -> None:
        """Wait for the reductions still in flight when training ends (their gradients are not
        applied: no step follows), so no rank leaves with a collective pending, and stop the
        link's thread. Unrecorded: it is after the last measured step."""
        while self.in_flight:
            item = self.in_flight.popleft()
            if item.linked is not None:
                item.linked.result()
            else:
                item.work.wait()
        if self.link_thread is not None:
            self.link_thread.shutdown(wait=True)
            self.link_thread = None


def apply(params: list[torch.nn.Parameter], buffer: torch.Tensor) -> None:
    """The averaged gradients in ``buffer`` (flattened in ``params``' order) as the
    parameters' ``.grad``, for the optimizer's step."""
    for p, grad in zip(params, buffer.split([p.numel() for p in params]), strict=True):
        p.grad = grad.view_as(p).to(p.dtype)
