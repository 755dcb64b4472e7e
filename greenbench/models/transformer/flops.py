"""Training FLOPs per token of the Transformer (see `greenbench.models.flops` for conventions)."""

from __future__ import annotations

from greenbench.models.card import ModelInfo


def transformer_flops_per_token(info: ModelInfo, seq_len: int) -> float:
    """``6·N_non_embedding + 12·n_layers·d_model·seq_len`` (torchtitan)."""
    return 6.0 * info.n_params_non_embedding + 12.0 * info.n_layers * info.d_model * seq_len
