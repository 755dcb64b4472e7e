"""Analytic training FLOPs per token (forward + backward, no recompute), for MFU.

Two conventions are stored (`greenbench.vocabulary.flops`): **PaLM's**, below, where attention
runs over every key of the row, and the **causal** one (`greenbench.models.causal`), where
attention's score and weighted-sum FLOPs are scaled by the query–key pairs a document-causal
mask keeps in a packed row (``Σ len·(len+1)/2 / S²``) and the rest is counted as below. The
scans of Mamba and Mamba-2 have no causal discount: their counts are the same under both.

PaLM's convention, per token of a sequence of length S, for a model described by `ModelInfo`:

* Transformer: ``6·N + 12·L·d·S`` — torchtitan's ``get_num_flop_per_token``, after the PaLM
  paper's appendix B (Chowdhery et al. 2022). ``N`` is
  ``n_params_non_embedding``: every parameter except the input embedding table, so the untied LM
  head counts (its matmul is real work) and so do the few norm weights. ``6·N``: each weight does
  one multiply-add (2 FLOPs) per token forward and two backward. ``12·L·d·S``: attention scores
  and the weighted sum, 2 matmuls × 2 FLOPs × 3 (forward + backward), over ``n_heads · head_dim =
  d`` channels and S keys; causal masking is not discounted (the causal convention does) and
  flash attention's backward recompute is not counted, as in torchtitan.
* Mamba: ``6·N + 3·L·(9·D·n + 2·D)`` with ``D = d_inner`` (scan channels, expand × d) and
  ``n = d_state``. ``6·N`` as above (conv1d, A_log, D and norm weights are counted as if they
  were matmul weights; they are < 3% of N at every preset). The selective scan's forward cost is
  ``9·D·n`` per token, as given by the Mamba authors (A. Gu in state-spaces/mamba issue #110, the
  count VMamba's ``flops_selective_scan_fn`` uses), plus ``D`` for the D skip and ``D`` for the
  z gate; training ≈ 3 × forward. No term grows with S: that is the point of the architecture.
  The scan is a recurrence over the tokens, with no masked work: the causal convention
  discounts nothing.
* Mamba-2: ``6·N + 3·L·(2·Q·(G·n + D) + 4·n·D)`` with ``D = d_inner``, ``n = d_state``, ``G``
  groups of B and C and ``Q`` the SSD chunk length of the preset. ``6·N`` as for Mamba. The
  second term is the SSD scan's matmuls per token, forward: ``C·Bᵀ`` inside a chunk (``2·Q·n``
  per group, shared by the group's heads), its masked product with ``dt·x`` (``2·Q·D``), the
  chunk's state ``Bᵀ·(dt·x)`` and the start state's output ``C·S`` (``2·n·D`` each); training
  = 3 × forward. Element-wise work (the decay mask and its exponentials, D skip, gate, gated
  norm) is left out, as the Transformer's softmax is. The causal half of the Q × Q products is
  not discounted, under either convention: it is the SSD algorithm's own work, not a mask over
  a sequence. Q is counted as the preset's even where S < Q (the
  torch scan then computes one chunk of S) or where a kernel tiles otherwise (fla: 64).

`measured_flops_per_token` is a cross-check only. It sums the matmul FLOPs (mm, addmm, bmm,
baddbmm) that `torch.utils.flop_counter.FlopCounterMode` records over a forward + backward. That
misses CPU attention kernels (``_scaled_dot_product_flash_attention_for_cpu`` has no formula) and
all element-wise work, so on CPU it sees only the ``6·N`` part of a Transformer, and for Mamba the
projections plus the small batched products inside our scan, not the scan's element-wise work
(for Mamba-2 it sees the SSD scan's matmuls as well, the masked products at their full Q × Q).
Convolutions are left out on purpose: FlopCounterMode's ``convolution_backward`` formula ignores
``groups`` and overcounts a depthwise conv's weight gradient by the channel count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from greenbench.errors import SpecError
from greenbench.models.card import ModelInfo
from greenbench.models.causal import causal_flops_per_token, causal_fraction
from greenbench.models.mamba.flops import mamba_flops_per_token, mamba_scan_flops_per_token
from greenbench.models.mamba2.flops import mamba2_flops_per_token, mamba2_scan_flops_per_token
from greenbench.models.transformer.flops import (
    transformer_attention_flops_per_token,
    transformer_flops_per_token,
)

if TYPE_CHECKING:  # torch is imported by the cross-check alone: the formulas need none
    import torch

__all__ = [
    "causal_flops_per_token",
    "causal_fraction",
    "flops_per_token",
    "mamba2_flops_per_token",
    "mamba2_scan_flops_per_token",
    "mamba_flops_per_token",
    "mamba_scan_flops_per_token",
    "measured_flops_per_token",
    "transformer_attention_flops_per_token",
    "transformer_flops_per_token",
]


def flops_per_token(info: ModelInfo, seq_len: int) -> float:
    """Analytic training FLOPs per token of ``info``'s model at sequence length ``seq_len``
    (PaLM's convention: full attention)."""
    if seq_len < 1:
        raise SpecError(f"seq_len must be >= 1, got {seq_len}")
    from greenbench.models import FAMILIES

    if info.family not in FAMILIES:
        raise SpecError(
            f"no FLOP formula for model family {info.family!r}; "
            f"known: {', '.join(sorted(FAMILIES))}"
        )
    return FAMILIES[info.family].flops_per_token(info, seq_len)


def measured_flops_per_token(model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> float:
    """Matmul FLOPs of one forward + backward of ``batch``, per input position (FlopCounterMode).

    ``batch`` holds ``input_ids`` (B, T) and ``labels`` (plus optional ``position_ids`` /
    ``attention_mask``); positions are B·T, padding included, like the analytic formulas, which
    count work done per position. Gradients are taken with `torch.autograd.grad`, so the model's
    ``.grad`` fields are left untouched. Sees matmuls only (see the module docstring).
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    params = [p for p in model.parameters() if p.requires_grad]
    counter = FlopCounterMode(display=False)
    with counter:
        loss = model(**batch).loss
        torch.autograd.grad(loss, params)
    counts = counter.get_flop_counts()["Global"]
    matmul_flops = sum(counts.get(op, 0) for op in (aten.mm, aten.addmm, aten.bmm, aten.baddbmm))
    return matmul_flops / batch["input_ids"].numel()
