"""Model FLOPs under the causal convention (`greenbench.vocabulary.flops`), for packed rows.

A row of width ``S`` holds documents laid end to end (`greenbench.data.batches`); the
Transformer masks attention between them, so a token attends only to the earlier tokens of its
own document and itself. Of the row's ``S²`` query–key pairs that PaLM's convention counts, the
mask keeps ``Σ len·(len+1)/2`` over the row's documents (`causal_fraction`); attention's score
and weighted-sum FLOPs (the card's ``attention``) are scaled by that share, everything else is
counted as under PaLM's convention. Padding at a row's end is no document: its pairs are not
kept. A family without attention (Mamba, Mamba-2) has nothing to scale: its scans have no causal
discount, so its count is the same under both conventions. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence

from greenbench.errors import SpecError
from greenbench.models.card import ModelInfo


def causal_fraction(doc_lengths: Sequence[int], width: int) -> float:
    """The share of a row's ``width²`` query–key pairs a document-causal mask keeps:
    ``Σ len·(len+1)/2 / width²`` over the row's documents (1/2 + 1/(2·width) for one document
    filling the row)."""
    if width < 1:
        raise SpecError(f"a row's width must be >= 1, got {width}")
    if sum(doc_lengths) > width or any(n < 1 for n in doc_lengths):
        raise SpecError(f"documents {tuple(doc_lengths)} do not fit a row of {width} tokens")
    return sum(n * (n + 1) / 2 for n in doc_lengths) / width**2


def causal_flops_per_token(info: ModelInfo, width: int, doc_lengths: Sequence[int]) -> float:
    """Training FLOPs per token of a row of ``width`` positions packed with documents of
    ``doc_lengths`` under the causal convention: PaLM's count at ``width`` with attention's part
    scaled by `causal_fraction`."""
    from greenbench.models import FAMILIES

    card = FAMILIES[info.family]
    full = card.flops_per_token(info, width)
    attention = card.attention_flops_per_token(info, width)
    return full - attention + attention * causal_fraction(doc_lengths, width)
