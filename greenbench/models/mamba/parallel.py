"""How Mamba is split: its blocks (FSDP units, pipeline cut points), and tensor parallelism.

Tensor parallelism splits the inner channels (``d_inner``): ``in_proj`` column-wise, the
depthwise conv, the selective scan, ``D`` and the gate per channel, ``out_proj`` row-wise. What
needs the full width is ``x_proj``, which mixes every inner channel into Δ's low-rank input and
the scan's B and C (an all-reduce of a small tensor per layer). That plan needs a custom
parallel style for the x_proj reduction; it is built with the hybrid layouts, not here, so the
family states the reason instead of a plan.
"""

from __future__ import annotations

import torch

from greenbench.models.family import ModelInfo, TensorParallel


def blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The Mamba blocks of a `MambaForCausalLM`, in order."""
    return list(model.backbone.layers)


def tp_divides(info: ModelInfo) -> dict[str, int]:
    """What a tensor-parallel degree must divide: each rank holds whole inner channels."""
    return {"inner channels (d_inner)": info.d_inner or 0}


TENSOR_PARALLEL = TensorParallel(
    divides=tp_divides,
    plan=None,
    reason=(
        "x_proj mixes every inner channel into Δ, B and C, so a channel split needs an "
        "all-reduce inside the mixer; that style comes with the hybrid layouts"
    ),
)
