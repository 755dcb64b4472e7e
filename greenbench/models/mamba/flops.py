"""Training FLOPs per token of Mamba (see `greenbench.models.flops` for conventions)."""

from __future__ import annotations

from greenbench.errors import SpecError
from greenbench.models.card import ModelInfo


def mamba_scan_flops_per_token(info: ModelInfo) -> float:
    """Training FLOPs of the selective scans alone: ``3·L·(9·D·n + 2·D)``."""
    if info.d_inner is None or info.d_state is None:
        raise SpecError(f"model {info.family}/{info.size} has no selective-scan shape")
    d_inner, d_state = info.d_inner, info.d_state
    return 3.0 * info.n_layers * (9.0 * d_inner * d_state + 2.0 * d_inner)


def mamba_flops_per_token(info: ModelInfo, seq_len: int) -> float:
    """``6·N_non_embedding`` + the selective scans; ``seq_len`` does not enter.

    The same under both conventions (`greenbench.vocabulary.flops`): the scan has no causal
    discount, and the card names no attention part."""
    del seq_len  # linear-time model: per-token cost is independent of sequence length
    return 6.0 * info.n_params_non_embedding + mamba_scan_flops_per_token(info)
