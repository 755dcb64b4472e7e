"""Data parallelism with torch's DistributedDataParallel (``layout.dp_replicate`` ranks).

Gradients are all-reduced once per optimizer step (``no_sync`` on every microbatch but the
last), as gradient accumulation does in practice. Ranks meet in a timed barrier before the last
microbatch's backward, so the time a fast rank waits for a slow one is measured, not hidden
inside the all-reduce.

Time in communication: DDP all-reduces gradient buckets asynchronously while backward still
computes, through a communication hook with DDP's default arithmetic (divide by the world size,
all-reduce with a sum) that records every bucket (`greenbench.distributed.comm`). On CPU the hook
notes when the last bucket became ready: what backward then spends until it returns is time
blocked in the all-reduce, recorded as one call per step with the buckets' bytes. On CUDA every
bucket's all-reduce is timed with CUDA events from its issue to its completion.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.distributed.device import DistContext
from greenbench.strategies.base import DataParallel
from greenbench.strategies.schedule import StepSchedule

if TYPE_CHECKING:
    from greenbench.sources.contract import Loss, ModelSource

DIM = "dp_replicate"


@dataclass(slots=True)
class Buckets:
    """On CPU: when the step's last gradient bucket became ready, and the buckets' bytes."""

    last_ready: float = 0.0
    nbytes: int = 0


class DDP(DataParallel):
    name = "ddp"
    buckets: Buckets

    def parallelize(self, model: ModelSource) -> torch.nn.Module:
        module = model.build(self.ctx.device)
        ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        if self.mesh is not None:
            ddp = DistributedDataParallel(module, device_ids=ids, device_mesh=self.mesh)
        else:
            ddp = DistributedDataParallel(module, device_ids=ids)
        group = self.mesh.get_group(DIM) if self.mesh is not None else None
        world = self.layout.dp_replicate
        cuda = self.ctx.device.type == "cuda"
        buckets = self.buckets = Buckets()

        # unannotated: DDP checks a hook's annotations against the classes themselves,
        # which postponed (string) annotations would fail
        def recorded_allreduce(state, bucket):  # type: ignore[no-untyped-def]
            buffer = bucket.buffer().div_(world)
            if not cuda:
                buckets.last_ready = time.perf_counter()
                buckets.nbytes += tensor_bytes(buffer)
                work = dist.all_reduce(buffer, group=group, async_op=True)
                return work.get_future().then(lambda fut: fut.value()[0])
            with self.comm.span(DIM, "all_reduce", tensor_bytes(buffer)) as call:
                work = dist.all_reduce(buffer, group=group, async_op=True)
            return self.comm.finish_async(call, work).then(lambda fut: fut.value()[0])

        ddp.register_comm_hook(None, recorded_allreduce)
        return ddp

    def schedule(self, loss: Loss) -> StepSchedule:
        """The shared step, gradients synchronised once (after `parallelize`)."""
        return DDPSchedule(self.ctx, self.comm, loss, self.buckets)


class DDPSchedule(StepSchedule):
    """Gradients synchronised on the last microbatch only, ranks meeting just before it, the
    time backward then spends blocked in the all-reduce recorded (CPU)."""

    def __init__(self, ctx: DistContext, comm: CommRecorder, loss: Loss, buckets: Buckets) -> None:
        super().__init__(ctx, comm, loss)
        self.buckets = buckets

    @contextlib.contextmanager
    def microbatch(self, model: torch.nn.Module, last: bool) -> Iterator[None]:
        if not last:
            with model.no_sync():
                yield
            return
        self.buckets.last_ready, self.buckets.nbytes = 0.0, 0
        yield
        if self.buckets.last_ready:  # backward returned once every bucket's all-reduce completed
            blocked = max(0.0, time.perf_counter() - self.buckets.last_ready)
            self.comm.add(DIM, "all_reduce", self.buckets.nbytes, blocked)

    def wait_point(self, index: int, count: int) -> bool:
        return index == count - 1

    def loss_scale(self, global_tokens: int) -> float:
        # DDP averages gradients over ranks; scale up so the result is sum / global_tokens.
        return self.ctx.world_size / global_tokens
