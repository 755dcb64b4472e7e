"""Training FLOPs per token of the Transformer (see `greenbench.models.flops` for conventions)."""

from __future__ import annotations

from greenbench.models.card import ModelInfo


def transformer_attention_flops_per_token(info: ModelInfo, seq_len: int) -> float:
    """Attention's scores and weighted sum over all ``seq_len`` keys: ``12·n_layers·d_model·S``
    (2 matmuls × 2 FLOPs × 3 for forward + backward, over ``n_heads · head_dim = d`` channels):
    the part of the count a causal mask discounts."""
    return 12.0 * info.n_layers * info.d_model * seq_len


def transformer_flops_per_token(info: ModelInfo, seq_len: int) -> float:
    """``6·N_non_embedding + 12·n_layers·d_model·seq_len`` (torchtitan; PaLM's convention)."""
    return 6.0 * info.n_params_non_embedding + transformer_attention_flops_per_token(info, seq_len)
