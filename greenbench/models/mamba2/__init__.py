"""The Mamba-2 family: transformers' `Mamba2ForCausalLM` whose mixers train on the SSD scan the
``model.scan`` setting picks (greenbench's chunked torch SSD, fla-core or mamba-ssm).

Its card (`CARD`, torch-free) and FLOP formulas are imported here; the torch modules are
imported when one of their names is first asked for."""

from __future__ import annotations

import importlib
from typing import Any

from greenbench.models.mamba2.card import CARD, PRESETS, info
from greenbench.models.mamba2.flops import mamba2_flops_per_token, mamba2_scan_flops_per_token

#: name -> the module that defines it (imported on first access)
_LAZY = {
    "SSDMamba2Mixer": "model",
    "build": "model",
    "causal_depthwise_conv1d": "model",
    "make_config": "model",
    "use_ssd_scan": "model",
    "scan_function": "kernels",
    "ssd_scan": "ssd",
}

__all__ = [
    "CARD",
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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
