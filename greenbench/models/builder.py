"""The torch side every model family shares: what a strategy receives to build a model.

A family's torch-free description is its card (`greenbench.models.card.ModelCard`); its torch
parts (`greenbench.models.card.FamilyParts`) name its builder, its blocks (the units FSDP wraps
one by one and a pipeline cuts between), its `TensorParallel` split, its pipeline stages, its
context-parallel form and its fused kernels. `ModelBuilder` builds a run's model from a card;
`compile_blocks` and the fused-loss mark apply to a built model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from greenbench.models.card import ModelCard, ModelInfo, TensorParallel

__all__ = [
    "FUSED_LOSS_ATTR",
    "ModelBuilder",
    "ModelInfo",
    "TensorParallel",
    "compile_blocks",
    "fuses_loss",
]


@dataclass(frozen=True, slots=True)
class ModelBuilder:
    """What a strategy receives: everything needed to build this run's model, and its blocks.

    ``build(device)`` seeds torch's RNG with ``seed`` and constructs the model (``"meta"``
    builds shapes only), so every rank and the single-process reference get the same weights.
    With ``fused``, the family's fused kernels are applied (``fuse``); with ``compile``, each
    block's forward is compiled (`compile_blocks`); both as the model is built, before any
    strategy wraps, shards or splits it.
    """

    family: ModelCard
    size: str
    seed: int
    kernel: str = "none"
    vocab_size: int | None = None
    compile: bool = False
    fused: bool = False

    @property
    def info(self) -> ModelInfo:
        return self.family.info(self.size, vocab_size=self.vocab_size)

    def build(self, device: str | torch.device | None = None) -> torch.nn.Module:
        torch.manual_seed(self.seed)
        if device is None:
            model = self.family.build(self.size, vocab_size=self.vocab_size, kernel=self.kernel)
        else:
            with torch.device(device):
                model = self.family.build(self.size, vocab_size=self.vocab_size, kernel=self.kernel)
        if self.fused:
            if self.family.fuse is None:
                raise ValueError(f"model family {self.family.name!r} has no fused kernels")
            self.family.fuse(model, torch.device(device or "cpu").type)
        if self.compile:
            compile_blocks(self.family.blocks(model))
        return model

    def blocks(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        return self.family.blocks(model)


#: set on a model whose forward, given ``labels`` and ``num_items_in_batch=1``, returns the
#: summed next-token loss itself (computed fused with the LM head, logits never materialised)
FUSED_LOSS_ATTR = "greenbench_fused_loss"


def fuses_loss(model: torch.nn.Module) -> bool:
    """Whether ``model`` (or the module a DDP wrapper holds) computes its loss in its forward."""
    return bool(getattr(getattr(model, "module", model), FUSED_LOSS_ATTR, False))


def compile_blocks(blocks: list[torch.nn.Module]) -> None:
    """Compile each block's ``forward`` with `torch.compile`, in place, as torchtitan compiles
    each transformer block: the module stays itself (same parameters, same class), so FSDP2's
    hooks, DDP's wrapper and a tensor-parallel plan apply to it as to an eager block and run
    eagerly around the compiled forward. Compilation happens at the first call."""
    for block in blocks:
        block.forward = torch.compile(block.forward)  # type: ignore[method-assign]
