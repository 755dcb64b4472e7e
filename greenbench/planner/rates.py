"""Compute priced per family and kernel: a block's matrix products and its sequence-mixing
kernel (attention, a scan) at rates of their own.

One sustained FLOP/s for every family prices a Mamba step like a Transformer's, while a scan
runs far below a GEMM's rate (Mamba-1B trains at about half a Transformer's MFU on GPUs). With
a calibration per family (`greenbench.planner.family_fit`), the compute of one device is

    tokens × (dense / dense rate + kernel / kernel rate)

per token of the busiest device, where

* ``dense``: the matrix products, ``6 ×`` the parameters of the blocks the device holds (over
  ``tp``) and the LM head on the last stage (``6 × (vocab × d + d)``, whole on every tp rank);
* ``kernel``: the family's kernel term (`greenbench.models.card.PlannerTerms`: ``kernel_flops``,
  the Transformer's ``12·d·S`` attention, Mamba's scan) over ``tp``. A causal kernel
  (attention) is discounted: a token attends to the keys before it only, ``(S + 1) / 2S`` of
  the full count. Under context parallelism the sequence is cut over ``cp`` ranks in the
  family's CP layout (its card's ``cp_layout``). Cut into contiguous chunks, a chunk's queries
  attend to every earlier chunk, so the last rank is the busiest: per token of its chunk of
  ``c = S / cp`` tokens it attends ``(cp − 1)·c + (c + 1) / 2`` keys, a share ``(cp − ½) / cp``
  of the full count against ``½`` on one rank (`causal_share`): the imbalance is
  ``(2·cp − 1) / cp``. Cut zigzag (the Transformer's: rank r holds runs r and ``2·cp − 1 − r``
  of ``2·cp``, in our ring and in PyTorch's ``context_parallel`` alike) every rank attends
  ``(S + 1) / 2`` keys per token, one rank's share: no imbalance. A family's context-parallel
  form may add kernel work of its own (``cp_kernel_flops``: Mamba's start-state correction).

The busiest pipeline stage is the one with the most FLOPs (the first stages take the extra
blocks, the last the head). Without a family's rates the planner prices the card's whole FLOP
count at the device's one sustained FLOP/s (`greenbench.planner.cost`).
"""

from __future__ import annotations

from dataclasses import dataclass

from greenbench.models import ModelPreset
from greenbench.vocabulary import Layout

HEAD_FLOPS_PER_PARAM = 6  # forward 2 + backward 4 FLOPs per parameter and token


@dataclass(frozen=True, slots=True)
class Work:
    """FLOPs per token (of the device's tokens) one device computes, by rate."""

    dense: float
    kernel: float

    @property
    def total(self) -> float:
        return self.dense + self.kernel


@dataclass(frozen=True, slots=True)
class FamilyRate:
    """A family's fitted rates (FLOP/s per device: per GPU, per core of a CPU host), the
    ``kernel`` backend its calibration runs ran, the runs behind the fit and what a reader
    should know of it (``note``: e.g. one rate for both terms where the runs could not tell
    them apart)."""

    family: str
    kernel: str
    dense_flops: float
    kernel_flops: float
    runs: int
    note: str = ""

    def scaled(self, factor: float) -> FamilyRate:
        """The same rates times ``factor`` (a CPU rank's cores)."""
        return FamilyRate(self.family, self.kernel, self.dense_flops * factor,
                          self.kernel_flops * factor, self.runs, self.note)  # fmt: skip

    def seconds(self, work: Work, tokens: float) -> float:
        """Seconds ``tokens`` tokens of ``work`` take at these rates."""
        return tokens * (work.dense / self.dense_flops + work.kernel / self.kernel_flops)


def causal_share(seq_len: int, cp: int = 1, layout: str = "contiguous") -> float:
    """Share of a causal kernel's full count (every token against all ``seq_len`` keys) the
    busiest of ``cp`` context-parallel ranks computes per token of its chunk, cut in ``layout``
    (module docstring): ``((cp − 1)·c + (c + 1) / 2) / S`` with ``c = S / cp`` contiguous,
    ``(S + 1) / 2S`` zigzag (and on one rank)."""
    if layout == "zigzag":
        return (seq_len + 1) / (2 * seq_len)
    chunk = seq_len / cp
    return ((cp - 1) * chunk + (chunk + 1) / 2) / seq_len


def block_work(shape: ModelPreset, layout: Layout, seq_len: int) -> Work:
    """FLOPs per token of one block on one of ``layout.tp`` ranks (of ``layout.cp``)."""
    terms = shape.planner
    kernel = terms.kernel_flops(shape.info, seq_len)
    if terms.causal:
        kernel *= causal_share(seq_len, layout.cp, shape.card.cp_layout)
    if layout.cp > 1:
        kernel += terms.cp_kernel_flops(shape.info)
    dense = HEAD_FLOPS_PER_PARAM * shape.params_per_layer()
    return Work(dense / layout.tp, kernel / layout.tp)


def stage_blocks(n_layers: int, pp: int) -> list[int]:
    """Blocks per pipeline stage: as even as it goes, the first stages taking the extra ones."""
    return [n_layers // pp + (1 if i < n_layers % pp else 0) for i in range(pp)]


def device_work(shape: ModelPreset, layout: Layout, seq_len: int) -> Work:
    """FLOPs per token one tp rank of the busiest pipeline stage computes, by rate."""
    block = block_work(shape, layout, seq_len)
    head = HEAD_FLOPS_PER_PARAM * shape.head_params
    stages = stage_blocks(shape.n_layers, layout.pp)
    works = [
        Work(n * block.dense + (head if i == len(stages) - 1 else 0.0), n * block.kernel)
        for i, n in enumerate(stages)
    ]
    return max(works, key=lambda w: w.total)
