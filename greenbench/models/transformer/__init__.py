"""The Transformer family: a Llama-style decoder (transformers' `LlamaForCausalLM`, SDPA).

Its card (`CARD`, torch-free) is imported here; the torch modules (``model``, ``parallel``,
``context_parallel``, ``fused``) are imported when one of their names is first asked for."""

from __future__ import annotations

import importlib
from typing import Any

from greenbench.models.transformer.card import CARD, PRESETS, info

#: name -> the module that defines it (imported on first access)
_LAZY = {"build": "model", "make_config": "model"}

__all__ = ["CARD", "PRESETS", "build", "info", "make_config"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
