"""Synthetic token sequences a small model can learn: each token is an affine function of the one
before it (mod the vocabulary), with some noise. Deterministic in (seed, step, rank)."""

from __future__ import annotations

import torch


def token_batch(
    *, seed: int, step: int, rank: int, rows: int, seq_len: int, vocab: int
) -> torch.Tensor:
    """``rows`` sequences of ``seq_len`` tokens, this rank's share of optimizer step ``step``."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 1_009 + rank)
    tokens = torch.empty(rows, seq_len, dtype=torch.long)
    tokens[:, 0] = torch.randint(vocab, (rows,), generator=g)
    noise = torch.randint(vocab, (rows, seq_len), generator=g)
    keep = torch.rand(rows, seq_len, generator=g) > 0.1
    for t in range(1, seq_len):
        follow = (5 * tokens[:, t - 1] + 3) % vocab
        tokens[:, t] = torch.where(keep[:, t], follow, noise[:, t])
    return tokens
