"""A tiny causal language model of our own: token embeddings, a few residual blocks each mixing
the last ``KERNEL`` tokens (a learned weight per look-back and channel: a causal depthwise
convolution written as shifted sums) and then channels with an MLP, and a linear head. Nothing in
it is greenbench's."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

KERNEL = 4  # tokens each block looks back over


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.taps = nn.Parameter(torch.randn(KERNEL, width) / KERNEL)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = self.norm(h)  # (batch, tokens, width)
        tokens = x.shape[1]
        past = F.pad(
            x, (0, 0, KERNEL - 1, 0)
        )  # causal: earlier tokens only, zeros before the first
        h = h + sum(
            self.taps[k] * past[:, KERNEL - 1 - k : KERNEL - 1 - k + tokens] for k in range(KERNEL)
        )
        return h + self.mlp(h)


class TinyConvLM(nn.Module):
    def __init__(self, vocab: int, width: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def next_token_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting each token from the ones before it."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
