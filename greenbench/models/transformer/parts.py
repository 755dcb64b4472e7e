"""The Transformer's torch side (`greenbench.models.card.FamilyParts`): the builder, its blocks,
its tensor-parallel plan and pipeline stages, ring attention and PyTorch's SDPA
``context_parallel`` (CUDA) for context parallelism, and
liger-kernel's fused kernels. Reached through the card (`greenbench.models.transformer.card`)."""

from __future__ import annotations

from greenbench.models.card import FamilyParts
from greenbench.models.transformer.context_parallel import enable_ring_attention
from greenbench.models.transformer.fused import apply_liger
from greenbench.models.transformer.model import build
from greenbench.models.transformer.parallel import TENSOR_PARALLEL, blocks, pipeline_stage
from greenbench.models.transformer.torch_cp import enable_torch_context_parallel

PARTS = FamilyParts(
    build=build,
    blocks=blocks,
    tensor_parallel=TENSOR_PARALLEL,
    pipeline_stage=pipeline_stage,
    context_parallel=enable_ring_attention,
    torch_context_parallel=enable_torch_context_parallel,
    fuse=apply_liger,
)
