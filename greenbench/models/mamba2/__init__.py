"""The Mamba-2 family: transformers' `Mamba2ForCausalLM` whose mixers train on the SSD scan the
``model.scan`` setting picks (greenbench's chunked torch SSD, fla-core or mamba-ssm)."""

from __future__ import annotations

from greenbench.models.family import ModelFamily
from greenbench.models.mamba2.flops import mamba2_flops_per_token, mamba2_scan_flops_per_token
from greenbench.models.mamba2.kernels import CHOICES, resolve_scan, scan_function
from greenbench.models.mamba2.model import (
    PRESETS,
    SSDMamba2Mixer,
    build,
    causal_depthwise_conv1d,
    info,
    make_config,
    use_ssd_scan,
)
from greenbench.models.mamba2.parallel import TENSOR_PARALLEL, blocks, pipeline_stage
from greenbench.models.mamba2.ssd import ssd_scan

FAMILY = ModelFamily(
    name="mamba2",
    presets=PRESETS,
    build=build,
    info=info,
    flops_per_token=mamba2_flops_per_token,
    blocks=blocks,
    tensor_parallel=TENSOR_PARALLEL,
    pipeline_stage=pipeline_stage,
    kernel_choices=CHOICES,
    resolve_kernel=resolve_scan,
)

__all__ = [
    "FAMILY",
    "PRESETS",
    "SSDMamba2Mixer",
    "build",
    "causal_depthwise_conv1d",
    "info",
    "make_config",
    "mamba2_flops_per_token",
    "mamba2_scan_flops_per_token",
    "scan_function",
    "ssd_scan",
    "use_ssd_scan",
]
