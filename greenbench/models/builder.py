"""The torch side every model family shares: what a strategy receives to build a model.

A family's torch-free description is its card (`greenbench.models.card.ModelCard`); its torch
parts (`greenbench.models.card.FamilyParts`) name its builder, its blocks (the units FSDP wraps
one by one and a pipeline cuts between), its `TensorParallel` split, its pipeline stages, its
context-parallel form and its fused kernels. `ModelBuilder` builds a run's model from a card;
`checkpoint_blocks`, `compile_blocks` and the fused-loss mark apply to a built model.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from greenbench.models.card import ModelCard, ModelInfo, TensorParallel

__all__ = [
    "FUSED_LOSS_ATTR",
    "ModelBuilder",
    "ModelInfo",
    "TensorParallel",
    "checkpoint_blocks",
    "compile_blocks",
    "fuses_loss",
]


@dataclass(frozen=True, slots=True)
class ModelBuilder:
    """What a strategy receives: everything needed to build this run's model, and its blocks.

    ``build(device)`` seeds torch's RNG with ``seed`` and constructs the model (``"meta"``
    builds shapes only), so every rank and the single-process reference get the same weights.
    With ``fused``, the family's fused kernels are applied (``fuse``); with ``compile``, each
    block's forward is compiled (`compile_blocks`); with ``checkpoint``, each block's forward
    is recomputed in backward (`checkpoint_blocks`, inside the compiled forward, as torchtitan
    orders them); all as the model is built, before any strategy wraps, shards or splits it.
    """

    family: ModelCard
    size: str
    seed: int
    kernel: str = "none"
    vocab_size: int | None = None
    compile: bool = False
    fused: bool = False
    checkpoint: bool = False

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
        if self.checkpoint:
            checkpoint_blocks(self.family.blocks(model))
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


class _InputsHeld(torch.autograd.Function):
    """Identity on a checkpointed block's output that saves the block's tensor inputs for
    backward: the checkpoint holds them anyway (it runs the forward on them again), but in a
    closure that no saved-tensor hook sees; saved here, they are counted where saved
    activations are (`greenbench.rank.state_memory`) at no cost in memory (the same
    storages)."""

    @staticmethod
    def forward(ctx: Any, out: torch.Tensor, *held: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(*held)
        ctx.count = len(held)
        return out.view_as(out)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return (grad, *([None] * ctx.count))


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        out = checkpoint(forward, *args, use_reentrant=False, **kwargs)
        held = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        if isinstance(out, torch.Tensor):
            return _InputsHeld.apply(out, *held)
        if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
            return (_InputsHeld.apply(out[0], *held), *out[1:])
        return out

    return functools.wraps(forward)(run)


def checkpoint_blocks(blocks: list[torch.nn.Module]) -> None:
    """Make each block's ``forward`` an activation checkpoint (non-reentrant
    ``torch.utils.checkpoint``), in place: forward keeps only the block's inputs, and backward
    runs the block's forward again to get what it saved. Replacing ``forward`` rather than
    wrapping the module (torch's ``checkpoint_wrapper``) keeps the module itself, its parameter
    names and its class, so FSDP2, DDP, tensor-parallel plans and pipeline stages apply to it
    unchanged; module hooks (FSDP2's gathers, the tensor-parallel inputs' conversions) run
    around the checkpoint, and submodules' hooks inside it run again in the recomputation.
    The RNG state is preserved, so a block with dropout recomputes what it computed. The
    inputs the checkpoint holds are saved for backward once more (`_InputsHeld`) so that the
    saved-activation count sees them."""
    for block in blocks:
        block.forward = _checkpointed(block.forward)  # type: ignore[method-assign]
