"""Fully sharded data parallelism with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each transformer/mamba block is sharded on its own over a 1-D DeviceMesh, then the root. As in
the post-training frameworks the ODC paper measures, parameters are all-gathered and gradients
reduce-scattered for every microbatch, so ranks meet at every microbatch; a timed barrier
before each microbatch measures how long a fast rank waits for a slow one.

Gradient reduction is a plain sum, divided here through the loss scale
(``set_force_sum_reduction_for_comms`` + ``set_gradient_divide_factor(1)``): gloo has no
PREMUL_SUM, and averaging inside FSDP2 over gloo has been reported to sum instead of average.
The equivalence test against ``single`` guards this.
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from greenbench.strategies.base import Strategy


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
        for module in model.modules():
            if isinstance(module, FSDPModule):
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
