"""Data parallelism with torch's DistributedDataParallel.

Gradients are all-reduced once per optimizer step (``no_sync`` on every microbatch but the
last), as gradient accumulation does in practice. Ranks meet in a timed barrier before the last
microbatch's backward, so the time a fast rank waits for a slow one is measured, not hidden
inside the all-reduce.

Time in communication: DDP all-reduces gradient buckets asynchronously while backward still
computes, and at the end of backward waits for them. On CPU a communication hook (the same
arithmetic as DDP's default: divide by the world size, all-reduce with a sum) notes when the
last bucket became ready; what backward then spends until it returns is time blocked in
communication, recorded as one timed collective per step. The worker splits it across ranks
into transfer and waiting, as for FSDP (``greenbench.running.window.split_blocked``). On CUDA
the hook is not installed and communication is not timed (comm_s stays 0 there).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from greenbench.strategies.base import Strategy


class DDP(Strategy):
    name = "ddp"
    _last_ready: float = 0.0

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids)
        if self.ctx.device.type == "cpu":
            # unannotated: DDP checks a hook's annotations against the classes themselves,
            # which postponed (string) annotations would fail
            def timed_allreduce(state, bucket):  # type: ignore[no-untyped-def]
                self._last_ready = time.perf_counter()
                buffer = bucket.buffer().div_(self.ctx.world_size)
                work = dist.all_reduce(buffer, async_op=True)
                return work.get_future().then(lambda fut: fut.value()[0])

            ddp.register_comm_hook(None, timed_allreduce)
        return ddp

    @contextlib.contextmanager
    def microbatch(self, model: torch.nn.Module, last: bool) -> Iterator[None]:
        if not last:
            with model.no_sync():
                yield
            return
        self._last_ready = 0.0
        yield
        if self._last_ready:  # backward returned once every bucket's all-reduce completed
            self.collective_s.append(max(0.0, time.perf_counter() - self._last_ready))

    def wait_point(self, index: int, count: int) -> bool:
        return index == count - 1

    def loss_scale(self, global_tokens: int) -> float:
        # DDP averages gradients over ranks; scale up so the result is sum / global_tokens.
        return self.ctx.world_size / global_tokens
