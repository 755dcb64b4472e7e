"""Training FLOPs per token of Mamba-2 (see `greenbench.models.flops` for conventions)."""

from __future__ import annotations

from greenbench.errors import SpecError
from greenbench.models.card import ModelInfo


def mamba2_scan_flops_per_token(info: ModelInfo) -> float:
    """Training FLOPs of the SSD scans' matmuls alone: ``3·L·(2·Q·(G·N + D) + 4·N·D)``.

    Per token and layer, forward, with ``Q`` the chunk length, ``D = d_inner`` (heads × head
    dim), ``N = d_state`` and ``G = n_groups``: ``C·Bᵀ`` inside the chunk, ``2·Q·N`` per group
    (shared by the group's heads); the masked product with ``dt·x``, ``2·Q·D``; the chunk's
    state ``(dt·x)ᵀ·B``, ``2·N·D``; the start state's output ``C·S``, ``2·N·D``.
    """
    if info.d_inner is None or info.d_state is None or not info.chunk_size:
        raise SpecError(f"model {info.family}/{info.size} has no SSD scan shape")
    d_inner, d_state, chunk = info.d_inner, info.d_state, info.chunk_size
    groups = info.n_groups or 1
    forward = 2.0 * chunk * (groups * d_state + d_inner) + 4.0 * d_state * d_inner
    return 3.0 * info.n_layers * forward


def mamba2_flops_per_token(info: ModelInfo, seq_len: int) -> float:
    """``6·N_non_embedding`` + the SSD scans' matmuls; ``seq_len`` does not enter.

    The same under both conventions (`greenbench.vocabulary.flops`): the scan has no causal
    discount, and the card names no attention part."""
    del seq_len  # chunked: the quadratic part spans one chunk, never the sequence
    return 6.0 * info.n_params_non_embedding + mamba2_scan_flops_per_token(info)
