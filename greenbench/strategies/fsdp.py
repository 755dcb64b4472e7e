"""Fully sharded data parallelism with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each transformer/mamba block is sharded on its own over a 1-D DeviceMesh, then the root. As in
the post-training frameworks the ODC paper measures, parameters are all-gathered and gradients
reduce-scattered for every microbatch, so ranks meet at every microbatch; a timed barrier
before each microbatch measures how long a fast rank waits for a slow one.

Gradient reduction is a plain sum, divided here through the loss scale
(``set_force_sum_reduction_for_comms`` + ``set_gradient_divide_factor(1)``): gloo has no
PREMUL_SUM, and averaging inside FSDP2 over gloo has been reported to sum instead of average.
The equivalence test against ``single`` guards this.

Time in communication: on CPU, FSDP2 issues its all-gathers and reduce-scatters synchronously,
so each call's duration is the time this rank was blocked in it (transfer plus waiting for the
slowest peer). We time every call through FSDP2's ``set_custom_all_gather`` /
``set_custom_reduce_scatter`` (subclasses of its default implementations, which are private to
torch: without them nothing is timed). The worker then splits each call's time across ranks:
the last rank to arrive waited for no one, so the shortest time is transfer and the rest is
waiting (``greenbench.running.window.split_blocked``). On CUDA the calls are asynchronous and
are not timed (comm_s stays 0 there).
"""

from __future__ import annotations

import time

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from greenbench.strategies.base import Strategy

try:  # FSDP2's default collectives: public hooks, private classes
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )
except ImportError:  # pragma: no cover - another torch layout: leave collectives untimed
    DefaultAllGather = DefaultReduceScatter = None  # type: ignore[assignment,misc]


def _timed(base: type, log: list[float]) -> object:
    """An instance of FSDP2 collective class ``base`` that appends each call's seconds to log."""

    class Timed(base):  # type: ignore[misc,valid-type]
        def __call__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            work = super().__call__(*args, **kwargs)
            log.append(time.perf_counter() - start)
            return work

    return Timed()


def blocks_of(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of a Hugging Face causal LM (Llama: model.layers; Mamba: layers)."""
    for path in ("model.layers", "backbone.layers"):
        module = model
        try:
            for part in path.split("."):
                module = getattr(module, part)
        except AttributeError:
            continue
        return list(module)
    raise ValueError(f"cannot find the blocks of {type(model).__name__} to shard")


class FSDP(Strategy):
    name = "fsdp"

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        mesh = init_device_mesh(self.ctx.device.type, (self.ctx.world_size,))
        for block in blocks_of(model):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        timed = self.ctx.device.type == "cpu" and DefaultAllGather is not None
        for module in model.modules():
            if isinstance(module, FSDPModule):
                if timed:
                    module.set_custom_all_gather(_timed(DefaultAllGather, self.collective_s))
                    module.set_custom_reduce_scatter(
                        _timed(DefaultReduceScatter, self.collective_s)
                    )
                # plain SUM collectives (gloo has no PREMUL_SUM/AVG) and no division: the
                # loss scale already divides by the minibatch's global token count
                module.set_force_sum_reduction_for_comms(True)
                module.set_gradient_divide_factor(1.0)
        return model

    def wait_point(self, index: int, count: int) -> bool:
        return index < count

    def loss_scale(self, global_tokens: int) -> float:
        # Gradients are summed over ranks (divide factor 1): sum / global_tokens is exact.
        return 1.0 / global_tokens
