"""The Mamba family: Mamba-1 (transformers' `MambaForCausalLM`) with greenbench's fast mixer and
selective scan, whose backend is the ``model.scan`` setting."""

from __future__ import annotations

from greenbench.models.family import ModelFamily
from greenbench.models.mamba.flops import mamba_flops_per_token
from greenbench.models.mamba.kernels import CHOICES, resolve_scan
from greenbench.models.mamba.model import (
    PRESETS,
    FastScanMambaMixer,
    build,
    causal_depthwise_conv1d,
    info,
    make_config,
    use_fast_scan,
)
from greenbench.models.mamba.parallel import TENSOR_PARALLEL, blocks, pipeline_stage

FAMILY = ModelFamily(
    name="mamba",
    presets=PRESETS,
    build=build,
    info=info,
    flops_per_token=mamba_flops_per_token,
    blocks=blocks,
    tensor_parallel=TENSOR_PARALLEL,
    pipeline_stage=pipeline_stage,
    kernel_choices=CHOICES,
    resolve_kernel=resolve_scan,
)

__all__ = [
    "FAMILY",
    "PRESETS",
    "FastScanMambaMixer",
    "build",
    "causal_depthwise_conv1d",
    "info",
    "make_config",
    "use_fast_scan",
]
