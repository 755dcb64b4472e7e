"""The Mamba family: Mamba-1 (transformers' `MambaForCausalLM`) with greenbench's fast mixer and
selective scan, whose backend is the ``model.scan`` setting.

Its card (`CARD`, torch-free) is imported here; the torch modules are imported when one of their
names is first asked for."""

from __future__ import annotations

import importlib
from typing import Any

from greenbench.models.mamba.card import CARD, PRESETS, info

#: name -> the module that defines it (imported on first access)
_LAZY = {
    "FastScanMambaMixer": "model",
    "build": "model",
    "causal_depthwise_conv1d": "model",
    "make_config": "model",
    "use_fast_scan": "model",
}

__all__ = [
    "CARD",
    "PRESETS",
    "FastScanMambaMixer",
    "build",
    "causal_depthwise_conv1d",
    "info",
    "make_config",
    "use_fast_scan",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
