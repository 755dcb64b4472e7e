"""How Mamba-2 is split: its blocks (FSDP units, pipeline cut points), its pipeline stages, and
why it has no tensor-parallel split.

Tensor parallelism is refused. Splitting Mamba-2 by heads (Megatron-LM's way) needs the heads'
groups of B and C to split with them: each rank then holds whole groups, their B and C
projections and conv channels, and the gated RMSNorm normalises within a group, so it stays
local. That requires ``tp`` to divide ``n_groups``, and the presets have one group (Mamba-2's
published shapes): every head reads the same B and C, and the gated norm spans all ``d_inner``
channels. A split of that would replicate B and C on every rank (their parameters' gradients
then partial sums to all-reduce) and all-reduce the norm's statistics forward and backward: not
a split of the stock styles, nor one this project has checked. The card's `tp_divides` therefore
names the groups, and the spec refuses any ``tp > 1`` in one line ("layout.tp=2 does not divide
the 1 SSM groups ..."); ``apply`` refuses too, should anything reach it.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from greenbench.errors import SpecError
from greenbench.models.card import TensorParallel
from greenbench.models.mamba.parallel import MambaStage

REASON = (
    "Mamba-2's heads share one group of B and C and one gated RMSNorm over all inner channels, "
    "so a head split needs tp to divide n_groups (1 in every preset)"
)


def blocks(model: nn.Module) -> list[nn.Module]:
    """The Mamba-2 blocks of a `Mamba2ForCausalLM`, in order."""
    return list(model.backbone.layers)


def refuse_tensor_parallel(block: nn.Module, tp_mesh: Any, ops: Any) -> None:
    raise SpecError(f"model.family=mamba2 has no tensor-parallel split: {REASON}")


TENSOR_PARALLEL = TensorParallel(plan=None, reason=REASON, apply=refuse_tensor_parallel)


def pipeline_stage(
    model: nn.Module, lo: int, hi: int, *, embed: bool | None = None, head: bool | None = None
) -> nn.Module:
    """Blocks ``[lo, hi)`` of ``model`` as one stage. `Mamba2ForCausalLM` is laid out as Mamba-1's
    model is (``backbone.embeddings``, ``backbone.layers``, ``backbone.norm_f``, ``lm_head``) and
    its blocks take the hidden states alone, so its stages are `MambaStage`s."""
    return MambaStage(model, lo, hi, embed, head)
