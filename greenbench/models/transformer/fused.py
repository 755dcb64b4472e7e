"""The Transformer with liger-kernel's fused operations (``model.liger``), as the field trains
Llama on GPUs when the package is installed.

liger-kernel (LinkedIn's Triton kernels for Hugging Face models) replaces, on one model
instance: RMSNorm, RoPE and the SwiGLU MLP with fused kernels, and the LM head plus
cross-entropy with its fused linear cross-entropy, which computes the loss chunk by chunk
without ever materialising the logits (for a 32k vocabulary those are the largest activation of
a small model). We use it rather than writing these kernels: it is the kept library for exactly
this, and its `apply_liger_kernel_to_llama(model=...)` patches one instance.

Two things follow for a run:

* the loss: with the fused loss the model's forward takes the labels and returns the summed
  next-token loss itself (``num_items_in_batch=1`` makes liger's reduction a plain sum, the
  same quantity `greenbench.sources.builtin.next_token_loss` computes from logits); the model is
  marked so that the loss asks it (`greenbench.models.builder.fuses_loss`);
* the parts: on CUDA all four. On CPU liger's kernels run only under Triton's interpreter
  (``TRITON_INTERPRET=1``, how they are tested here), where its norm, RoPE and SwiGLU kernels
  fail (Triton 3.9); there only the fused loss is applied. `liger_parts` names what a run on a
  device uses, for its record.

Patching is process-wide for liger's norm, RoPE and MLP classes (it rebinds names in
transformers' ``modeling_llama``); a run's worker builds one model per process, so nothing else
sees it.
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # whether liger applies is asked before any run, without torch
    import torch


def liger_available() -> bool:
    """Whether liger-kernel is installed (its import is deferred to `apply_liger`)."""
    return importlib.util.find_spec("liger_kernel") is not None


def liger_runs_on(device: str) -> bool:
    """Whether liger's Triton kernels run on ``device``: CUDA, or CPU under the interpreter."""
    return device == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def liger_parts(device: str) -> dict[str, str]:
    """The kernels a run with ``model.liger: on`` uses on ``device``, by role."""
    parts = {"loss": "liger-fused-linear-cross-entropy"}
    if device == "cuda":
        parts |= {"norm": "liger-rmsnorm", "rope": "liger-rope", "mlp": "liger-swiglu"}
    return parts


def apply_liger(model: torch.nn.Module, device: str) -> dict[str, str]:
    """Apply liger's kernels for ``device`` to a built `LlamaForCausalLM`, in place; returns
    the kernels used (`liger_parts`)."""
    from liger_kernel.transformers import apply_liger_kernel_to_llama

    from greenbench.models.builder import FUSED_LOSS_ATTR

    parts = liger_parts(device)
    apply_liger_kernel_to_llama(
        rope="rope" in parts,
        cross_entropy=False,
        fused_linear_cross_entropy=True,
        rms_norm="norm" in parts,
        swiglu="mlp" in parts,
        model=model,
    )
    setattr(model, FUSED_LOSS_ATTR, True)
    return parts
