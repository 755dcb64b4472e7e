"""Data parallelism with torch's DistributedDataParallel.

Gradients are all-reduced once per optimizer step (``no_sync`` on every microbatch but the
last), as gradient accumulation does in practice. Ranks meet in a timed barrier before the last
microbatch's backward, so the time a fast rank waits for a slow one is measured, not hidden
inside the all-reduce.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.nn.parallel import DistributedDataParallel

from greenbench.strategies.base import Strategy


class DDP(Strategy):
    name = "ddp"

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    @contextlib.contextmanager
    def microbatch(self, model: torch.nn.Module, last: bool) -> Iterator[None]:
        with contextlib.nullcontext() if last else model.no_sync():
            yield

    def wait_point(self, index: int, count: int) -> bool:
        return index == count - 1

    def loss_scale(self, global_tokens: int) -> float:
        # DDP averages gradients over ranks; scale up so the result is sum / global_tokens.
        return self.ctx.world_size / global_tokens
