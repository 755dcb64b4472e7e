"""PyTorch's context parallelism for the Transformer on CUDA: SDPA, causal, load-balanced.

``torch.distributed.tensor.experimental`` turns CUDA SDPA (flash, memory-efficient or cuDNN
kernels, forward and backward) into ring attention over a cp ``DeviceMesh``: the inputs of an
SDPA call are made DTensors sharded on the sequence, and a dispatcher routes the kernel to its
ring version, which rotates K and V over the group (all-gather by default) and merges each
step's output with its log-sum-exp. With load balancing on it takes each rank's chunk to be the
head-tail split — rank r holds runs r and ``2·cp − 1 − r`` of the row's ``2·cp`` — which is our
``zigzag`` layout (`greenbench.distributed.context_parallel.chunk_pieces`), so the strategy cuts
the rows itself (`split_sequence`) and every rank's causal work is equal, as in our ring.

What it supports decides where it runs (`greenbench.models.card.ModelCard.cp_form`): SDPA only,
on CUDA only, with ``is_causal=True`` and no mask (load balancing is refused otherwise). A packed
row needs its document mask, so packed rows (and CPU runs) take our ring
(`greenbench.models.transformer.context_parallel`); rows of one document each (``data.lengths
= fixed``) on CUDA take this. The run stores which, and why, among its kernels (role
``context_parallel``).

How it is applied, as torchtitan does with the same private entry points (they may change with
torch): each `LlamaAttention` gets a child `CausalSDPA`, the one call to
``F.scaled_dot_product_attention`` (``is_causal=True``), wrapped by torch's ``_ContextParallel``
style (forward hooks: tensors in as ``Shard(2)`` DTensors on the cp mesh, local tensors out);
the dispatcher is enabled once, for the process (it acts only on DTensor SDPA calls, which
nothing else here makes), and load balancing is switched on. The attention function registered
as ``greenbench_torch_cp`` repeats the KV heads to the query heads (the ring kernels take equal
head counts) and calls it; transformers builds no mask for that name.

Not measured here: the ring's all-gathers are torch's functional collectives, outside our
`CommRecorder`, so a run on this path records no ``cp`` messages (the FSDP and tp ones still
are). Written against torch 2.13's implementation; it has not run on a GPU in this project's
tests yet (`tests/strategies/test_torch_cp.py` is marked ``cuda``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.models.llama.modeling_llama import LlamaAttention, repeat_kv

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

ATTENTION_NAME = "greenbench_torch_cp"


class CausalSDPA(nn.Module):
    """Causal SDPA of (B, H, T, D) q, k, v: the module torch's ``_ContextParallel`` wraps."""

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float
    ) -> torch.Tensor:
        return F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scale)


def torch_cp_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature, for ``_attn_implementation =
    "greenbench_torch_cp"``: (B, T, H, D) output of the module's wrapped `CausalSDPA`."""
    sdpa: CausalSDPA | None = getattr(module, "cp_sdpa", None)
    if sdpa is None:
        raise RuntimeError(f"{ATTENTION_NAME}: enable_torch_context_parallel did not reach it")
    if attention_mask is not None:
        raise NotImplementedError(f"{ATTENTION_NAME} takes no attention_mask (is_causal only)")
    if dropout:
        raise NotImplementedError(f"{ATTENTION_NAME} has no attention dropout")
    groups = query.shape[1] // key.shape[1]
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    out = sdpa(query, repeat_kv(key, groups), repeat_kv(value, groups), scale=scale)
    return out.transpose(1, 2).contiguous(), None


def enable_torch_context_parallel(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:
    """Make every `LlamaAttention` in ``model`` (a whole model or a pipeline stage) attend with
    PyTorch's ring over the cp ``mesh`` (in place). Feed each rank its zigzag chunk with its
    ``position_ids`` (`split_sequence` with ``layout="zigzag"``); CUDA only."""
    from torch.distributed.tensor.experimental._attention import (
        _ContextParallel,
        _cp_options,
        _enable_context_parallel_dispatcher,
    )
    from torch.distributed.tensor.parallel import parallelize_module

    if mesh.device_type != "cuda":
        raise ValueError(f"torch context_parallel runs on CUDA only, not {mesh.device_type!r}")
    _enable_context_parallel_dispatcher()
    _cp_options.enable_load_balance = True  # the chunks are head-tail (zigzag): see module doc
    AttentionInterface.register(ATTENTION_NAME, torch_cp_attention_forward)
    style = _ContextParallel(seq_dim=2, attention_type=_ContextParallel.AttentionType.SDPA)
    attentions = [m for m in model.modules() if isinstance(m, LlamaAttention)]
    for module in attentions:  # children added after the walk, not during it
        module.cp_sdpa = parallelize_module(CausalSDPA(), mesh, style)
        module.config._attn_implementation = ATTENTION_NAME
    if not attentions:
        raise ValueError("enable_torch_context_parallel: the model has no LlamaAttention modules")
    config = getattr(model, "config", None)
    if config is not None:
        config._attn_implementation = ATTENTION_NAME
    return model
