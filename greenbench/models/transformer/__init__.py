"""The Transformer family: a Llama-style decoder (transformers' `LlamaForCausalLM`, SDPA)."""

from __future__ import annotations

from greenbench.models.family import ModelFamily
from greenbench.models.transformer.flops import transformer_flops_per_token
from greenbench.models.transformer.fused import apply_liger
from greenbench.models.transformer.model import PRESETS, build, info, make_config
from greenbench.models.transformer.parallel import TENSOR_PARALLEL, blocks, pipeline_stage

FAMILY = ModelFamily(
    name="transformer",
    presets=PRESETS,
    build=build,
    info=info,
    flops_per_token=transformer_flops_per_token,
    blocks=blocks,
    tensor_parallel=TENSOR_PARALLEL,
    pipeline_stage=pipeline_stage,
    fixed_kernels={"attention": "sdpa"},
    fuse=apply_liger,
)

__all__ = ["FAMILY", "PRESETS", "build", "info", "make_config"]
