"""The Transformer's context-parallel form: ring attention on any device; causal, packed, GQA.

Each of the ``cp`` ranks holds the queries, keys and values of one contiguous chunk of every row
(`greenbench.distributed.context_parallel.split_sequence`). Keys and values travel around the
ring: at step s rank r holds chunk j = (r − s) mod cp, so after cp − 1 exchanges (send to the next
rank, receive from the previous one) every rank has met every chunk. Each block of scores
Q_r K_jᵀ is masked — chunk j after chunk r entirely (the block is skipped), j = r causally,
j before r not at all — and merged into the running output with the log-sum-exp rule

    lse = logaddexp(lse_a, lse_b),    out = e^(lse_a − lse) out_a + e^(lse_b − lse) out_b,

which is exact: the result equals softmax attention over the whole row. The first block is
always the rank's own (diagonal) one, where every query sees at least itself, so the running
log-sum-exp is finite from the start; masked scores are the dtype's lowest value (as transformers'
eager path does), so a row that sees nothing in a block gets weight exp(−huge) = 0, never NaN.

Packed rows: transformers (5.x) masks attention between the documents of a packed row, found
where ``position_ids`` do not step by one. The same mask is applied here from each token's
document key, ``global index − position id`` (constant within a document whose positions count
up from its start, different across documents); the keys of a chunk travel with its K and V.
Padding (position 0 at every pad token) makes each pad token a document of its own, as there.

Backward is written by hand (one autograd Function for the whole ring, as flash attention's):
the forward saves only this rank's q, k, v, its output and log-sum-exp; the backward sends K, V
around the ring again, recomputes each block's probabilities P = exp(S − lse), adds its share
to dQ, and accumulates the block's dK, dV in buffers that travel with the chunk; one more
exchange brings every chunk's dK, dV home. Keys and values travel with their n_kv_heads heads
(GQA): query heads are grouped per KV head (as transformers' ``repeat_kv`` pairs them), and the
group shares one K/V block without repeating it, so messages carry the KV heads only.

Messages: per attention layer, forward cp − 1 exchanges of (K, V, document keys); backward
cp − 1 of (K, V, keys) and cp of (dK, dV). Each send and receive is recorded on the ``cp``
dimension (ops ``send``/``recv``, the messages' bytes; the span is the time spent waiting for the
transfer after the overlapping block computation). With contiguous chunks the work is uneven —
rank r computes r + 1 blocks — and the wrap-around messages carry blocks their receiver masks;
a load-balanced split (each rank two mirrored chunks) would fix both and is not done here.

Why our own: PyTorch's ``context_parallel`` replaces CUDA SDPA kernels only; on CPU with gloo
there is nothing to replace, so the ring is written with ``batch_isend_irecv`` here. Blocks are
computed in float32 with plain matmuls (no fused kernel), whatever the autocast dtype.

Installed through transformers' attention-function registry: `enable_ring_attention` registers
``greenbench_ring`` (`transformers.AttentionInterface`) and sets it as the model config's
``_attn_implementation``; ``LlamaAttention.forward`` then calls `ring_attention_forward` with
the rotated q, k, v (B, heads, T, head_dim) and ``position_ids`` among its keyword arguments.
No mask is built for that name (transformers builds masks only for the names it knows), so a
2-D ``attention_mask`` would be dropped: it is not supported under CP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from transformers import AttentionInterface
from transformers.models.llama.modeling_llama import LlamaAttention

from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.cp_group import CPGroup, exchange

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

ATTENTION_NAME = "greenbench_ring"


def _scores(
    q: torch.Tensor,
    k: torch.Tensor,
    doc_q: torch.Tensor,
    doc_k: torch.Tensor,
    diagonal: bool,
    scaling: float,
    groups: int,
) -> torch.Tensor:
    """Masked scores of one block: q (B, Hkv, G·Tq, D) against k (B, Hkv, Tk, D)."""
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(scaling)
    batch, kv_heads, _, tk = scores.shape
    tq = doc_q.shape[1]
    allowed = doc_q[:, :, None] == doc_k[:, None, :]  # (B, Tq, Tk)
    if diagonal:
        allowed &= torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril_()
    lowest = torch.finfo(scores.dtype).min
    scores.view(batch, kv_heads, groups, tq, tk).masked_fill_(~allowed[:, None, None], lowest)
    return scores


class _RingAttention(torch.autograd.Function):
    """Causal attention of this rank's queries over every chunk's keys and values (module doc)."""

    @staticmethod
    def forward(ctx, q, k, v, doc, cpg, scaling, groups):  # type: ignore[override]
        rank, size = cpg.rank, cpg.size
        out = lse = None
        k_j, v_j, doc_j = k, v, doc
        for step in range(size):
            j = (rank - step) % size
            pending = None
            if step < size - 1:  # the next block travels while this one is computed
                nxt = (torch.empty_like(k_j), torch.empty_like(v_j), torch.empty_like(doc_j))
                pending = exchange(
                    cpg,
                    sends=[(k_j, cpg.next), (v_j, cpg.next), (doc_j, cpg.next)],
                    recvs=[(t, cpg.prev) for t in nxt],
                )
            if j <= rank:
                scores = _scores(q, k_j, doc, doc_j, j == rank, scaling, groups)
                lse_b = torch.logsumexp(scores, dim=-1)
                out_b = torch.matmul(scores.sub_(lse_b[..., None]).exp_(), v_j)
                if out is None:
                    out, lse = out_b, lse_b
                else:
                    merged = torch.logaddexp(lse, lse_b)
                    out = out * (lse - merged).exp_()[..., None]
                    out.addcmul_(out_b, (lse_b - merged).exp_()[..., None])
                    lse = merged
            if pending is not None:
                pending.wait()
                k_j, v_j, doc_j = nxt
        ctx.save_for_backward(q, k, v, doc, out, lse)
        ctx.cpg, ctx.scaling, ctx.groups = cpg, scaling, groups
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, doc, out, lse = ctx.saved_tensors
        cpg, scaling, groups = ctx.cpg, ctx.scaling, ctx.groups
        rank, size = cpg.rank, cpg.size
        grad_out = grad_out.contiguous()
        delta = (grad_out * out).sum(-1, keepdim=True)  # rowsum(dO ⊙ O)
        dq = torch.zeros_like(q)
        k_j, v_j, doc_j = k, v, doc
        dkv_pending = dkv_next = None
        for step in range(size):
            j = (rank - step) % size
            kv_pending = None
            if step < size - 1:
                nxt = (torch.empty_like(k_j), torch.empty_like(v_j), torch.empty_like(doc_j))
                kv_pending = exchange(
                    cpg,
                    sends=[(k_j, cpg.next), (v_j, cpg.next), (doc_j, cpg.next)],
                    recvs=[(t, cpg.prev) for t in nxt],
                )
            dk_b = dv_b = None
            if j <= rank:
                scores = _scores(q, k_j, doc, doc_j, j == rank, scaling, groups)
                p = scores.sub_(lse[..., None]).exp_()  # (B, Hkv, G·Tq, Tk)
                dv_b = torch.matmul(p.transpose(-1, -2), grad_out)
                ds = torch.matmul(grad_out, v_j.transpose(-1, -2)).sub_(delta).mul_(p)
                dq.add_(torch.matmul(ds, k_j), alpha=scaling)
                dk_b = torch.matmul(ds.transpose(-1, -2), q).mul_(scaling)
            if dkv_pending is None:  # this rank's own chunk: its accumulators start here
                dk_j, dv_j = torch.zeros_like(k_j), torch.zeros_like(v_j)
            else:
                dkv_pending.wait()
                dk_j, dv_j = dkv_next
            if dk_b is not None:
                dk_j.add_(dk_b)
                dv_j.add_(dv_b)
            # the chunk's gradients follow it to the next rank; after the last step they
            # arrive at the chunk's own rank
            dkv_next = (torch.empty_like(dk_j), torch.empty_like(dv_j))
            dkv_pending = exchange(
                cpg,
                sends=[(dk_j, cpg.next), (dv_j, cpg.next)],
                recvs=[(t, cpg.prev) for t in dkv_next],
            )
            if kv_pending is not None:
                kv_pending.wait()
                k_j, v_j, doc_j = nxt
        dkv_pending.wait()
        dk, dv = dkv_next
        return dq, dk, dv, None, None, None, None


def ring_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    position_ids: torch.Tensor,
    cpg: CPGroup,
    scaling: float | None = None,
) -> torch.Tensor:
    """Causal attention of this rank's chunk over the whole sequence held by the cp group.

    ``query`` (B, H, Tc, D), ``key``/``value`` (B, Hkv, Tc, D) with H a multiple of Hkv,
    ``position_ids`` (B or 1, Tc) of the chunk (packed documents restart at 0). Returns
    (B, Tc, H, D) in ``query``'s dtype (transformers' attention-output layout)."""
    batch, heads, tokens, head_dim = query.shape
    kv_heads = key.shape[1]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads are not a multiple of {kv_heads} KV heads")
    groups = heads // kv_heads
    scale = float(scaling) if scaling is not None else head_dim**-0.5
    index = torch.arange(tokens, device=query.device) + cpg.rank * tokens
    doc = (index - position_ids.to(query.device).expand(batch, tokens)).contiguous()
    f32 = torch.float32
    with torch.autocast(query.device.type, enabled=False):
        q = query.to(f32).reshape(batch, kv_heads, groups * tokens, head_dim)
        out = _RingAttention.apply(
            q.contiguous(),
            key.to(f32).contiguous(),
            value.to(f32).contiguous(),
            doc,
            cpg,
            scale,
            groups,
        )
    out = out.view(batch, heads, tokens, head_dim).transpose(1, 2).contiguous()
    return out.to(query.dtype)


def ring_attention_forward(
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
    "greenbench_ring"``; the cp group is the module's ``context_parallel`` attribute."""
    cpg: CPGroup | None = getattr(module, "context_parallel", None)
    if cpg is None:
        raise RuntimeError(f"{ATTENTION_NAME}: enable_ring_attention did not reach this module")
    if attention_mask is not None:
        raise NotImplementedError(f"{ATTENTION_NAME} takes no attention_mask (causal only)")
    if dropout:
        raise NotImplementedError(f"{ATTENTION_NAME} has no attention dropout")
    if not getattr(module, "is_causal", True) or kwargs.get("is_causal") is False:
        raise NotImplementedError(f"{ATTENTION_NAME} is causal only")
    position_ids = kwargs.get("position_ids")
    if position_ids is None:
        raise ValueError(f"{ATTENTION_NAME} needs the chunk's position_ids (split_sequence)")
    return ring_attention(query, key, value, position_ids, cpg, scaling), None


def enable_ring_attention(
    model: torch.nn.Module, group: ProcessGroup, comm: CommRecorder, dim: str = "cp"
) -> torch.nn.Module:
    """Make every `LlamaAttention` in ``model`` (a whole model or a pipeline stage) attend with
    the ring over ``group`` (in place), recording messages on ``dim`` in ``comm``.

    Feed each rank its chunk with its ``position_ids`` (`split_sequence`); without them
    transformers would number the chunk from 0 and rotary positions would be wrong."""
    AttentionInterface.register(ATTENTION_NAME, ring_attention_forward)
    cpg = CPGroup.of(group, comm, dim)
    found = False
    for module in model.modules():
        if isinstance(module, LlamaAttention):
            module.context_parallel = cpg
            module.config._attn_implementation = ATTENTION_NAME
            found = True
    if not found:
        raise ValueError("enable_ring_attention: the model has no LlamaAttention modules")
    config = getattr(model, "config", None)
    if config is not None:
        config._attn_implementation = ATTENTION_NAME
    return model
