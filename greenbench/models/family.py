"""What every model family exposes: its size presets, a builder, and a pure description.

A family (``transformer``, ``mamba``) is one file that defines a dict of size presets, like
torchtitan's flavours, and a `ModelFamily` bundling them. `ModelInfo` describes one (family, size)
analytically — parameter counts and the shape numbers the FLOP formulas need — so the planner, the
dashboard and MFU can use it without building a model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Analytic description of one model preset.

    ``n_params`` counts every trainable parameter once. ``n_params_embedding`` is the input
    embedding table only (vocab_size × d_model). ``n_params_non_embedding`` is the rest, and
    includes the LM head: both families are built with untied embeddings, so the head is its own
    matrix and its matmul is real compute (torchtitan's and the PaLM appendix's convention).
    Family-specific fields are ``None`` where they do not apply.
    """

    family: str
    size: str
    n_params: int
    n_params_embedding: int
    n_params_non_embedding: int
    n_layers: int
    d_model: int
    vocab_size: int
    # Transformer only.
    n_heads: int | None = None
    n_kv_heads: int | None = None
    d_ffn: int | None = None
    # Mamba only.
    d_inner: int | None = None  # expand × d_model: channels of the selective scan
    d_state: int | None = None  # N, the SSM state size per channel
    d_conv: int | None = None
    dt_rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class ModelFamily:
    """One model family: its presets, a builder and an analytic describer.

    ``build(size, vocab_size=...)`` constructs a randomly initialised model on the current default
    device (the caller seeds the RNG); ``info(size, vocab_size=...)`` returns its `ModelInfo`.
    """

    name: str
    presets: Mapping[str, Any]
    build: Callable[..., torch.nn.Module]
    info: Callable[..., ModelInfo]
