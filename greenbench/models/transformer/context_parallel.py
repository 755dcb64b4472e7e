"""The Transformer's context-parallel form: ring attention on any device; causal, packed, GQA.

Each of the ``cp`` ranks holds the queries, keys and values of its chunk of every row
(`greenbench.distributed.context_parallel.split_sequence`), by default the load-balanced
``zigzag`` layout: the row cut into ``2·cp`` runs, rank r holding runs r and ``2·cp − 1 − r``
(``contiguous``, one run per rank, is kept as a choice of `enable_ring_attention`). Keys and
values travel around the ring: at step s rank r holds rank j = (r − s) mod cp's chunk, so after
cp − 1 exchanges (send to the next rank, receive from the previous one) every rank has met every
chunk. Each step's block Q_r K_jᵀ is planned from the runs' row positions (`block_plan`): the
(query run, key run) pairs a causal mask does not wholly hide are the block's live pairs, and the
smallest rectangle of query and key runs holding them all is computed, the rest skipped. Within
it every score is masked from the tokens' row positions (a query sees keys at or before it) and
document keys (below), and merged into the running output of those queries with the
log-sum-exp rule

    lse = logaddexp(lse_a, lse_b),    out = e^(lse_a − lse) out_a + e^(lse_b − lse) out_b,

which is exact: the result equals softmax attention over the whole row. The first block is
always the rank's own (diagonal) one, whole, where every query sees at least itself, so the
running log-sum-exp is finite from the start; masked scores are the dtype's lowest value (as
transformers' eager path does), so a row that sees nothing in a block gets weight
exp(−huge) = 0, never NaN.

Work: with contiguous chunks rank r computes r + 1 blocks and the last rank is the busiest
(``2·cp − 1`` live half-run pairs against the first rank's 3). Zigzag gives every rank the
same: its own block (3 live pairs of runs out of 4) and one run's pairs with each other rank
(2: against a lower rank's head run, every query; against a higher rank's, the tail run's
queries against both of its runs), ``2·cp + 1`` in all (`ring_work` counts them with the ring's
own plan). The messages are the same size either way, and now every one is used.

Packed rows: transformers (5.x) masks attention between the documents of a packed row, found
where ``position_ids`` do not step by one. The same mask is applied here from each token's
document key, ``row position − position id`` (constant within a document whose positions count
up from its start, different across documents); the keys of a chunk travel with its K and V.
Padding (position 0 at every pad token) makes each pad token a document of its own, as there.

Backward is written by hand (one autograd Function for the whole ring, as flash attention's):
the forward saves only this rank's q, k, v, its output and log-sum-exp; the backward sends K, V
around the ring again, recomputes each planned block's probabilities P = exp(S − lse), adds its
share to dQ, and accumulates the block's dK, dV in buffers that travel with the chunk; one more
exchange brings every chunk's dK, dV home. Keys and values travel with their n_kv_heads heads
(GQA): query heads are grouped per KV head (as transformers' ``repeat_kv`` pairs them), and the
group shares one K/V block without repeating it, so messages carry the KV heads only.

Messages: per attention layer, forward cp − 1 exchanges of (K, V, document keys); backward
cp − 1 of (K, V, keys) and cp of (dK, dV). Each send and receive is recorded on the ``cp``
dimension (ops ``send``/``recv``, the messages' bytes; the span is the time spent waiting for the
transfer after the overlapping block computation).

Why our own: PyTorch's ``context_parallel`` replaces CUDA SDPA kernels only, under
``is_causal`` without a mask; on CPU with gloo there is nothing to replace, and a packed row
needs its document mask, so the ring is written with ``batch_isend_irecv`` here. Blocks are
computed in float32 with plain matmuls (no fused kernel), whatever the autocast dtype. On CUDA
with rows of one document each the run takes PyTorch's instead
(`greenbench.models.transformer.torch_cp`; the choice is the card's ``cp_form``).

Installed through transformers' attention-function registry: `enable_ring_attention` registers
``greenbench_ring`` (`transformers.AttentionInterface`) and sets it as the model config's
``_attn_implementation``; ``LlamaAttention.forward`` then calls `ring_attention_forward` with
the rotated q, k, v (B, heads, T, head_dim) and ``position_ids`` among its keyword arguments.
No mask is built for that name (transformers builds masks only for the names it knows), so a
2-D ``attention_mask`` would be dropped: it is not supported under CP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from transformers import AttentionInterface
from transformers.models.llama.modeling_llama import LlamaAttention

from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.context_parallel import chunk_index, chunk_pieces
from greenbench.distributed.cp_group import CPGroup, exchange

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

ATTENTION_NAME = "greenbench_ring"

#: the Transformer's CP layout (`greenbench.distributed.context_parallel.CP_LAYOUTS`)
LAYOUT = "zigzag"

Pieces = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class BlockPlan:
    """What one ring step computes: the local query and key slices (a rectangle of whole
    runs) and the (query run, key run) pairs in it that a causal mask does not wholly hide."""

    rows: slice
    cols: slice
    live: tuple[tuple[int, int], ...]


def _live(q: tuple[int, int], k: tuple[int, int]) -> bool:
    """Whether some query of row range ``q`` sees some key of ``k`` (the last query is at or
    after the first key)."""
    return q[1] - 1 >= k[0]


def _span(pieces: Pieces, used: set[int]) -> slice:
    """The local slice of a chunk covering its runs ``used`` (and any between them)."""
    offsets = [0]
    for a, b in pieces:
        offsets.append(offsets[-1] + b - a)
    return slice(offsets[min(used)], offsets[max(used) + 1])


def block_plan(q_pieces: Pieces, k_pieces: Pieces) -> BlockPlan | None:
    """The block a rank holding runs ``q_pieces`` computes against a chunk of ``k_pieces``
    (row ranges, in local order), or None where a causal mask hides all of it."""
    live = tuple(
        (a, b) for a, qp in enumerate(q_pieces) for b, kp in enumerate(k_pieces) if _live(qp, kp)
    )
    if not live:
        return None
    return BlockPlan(
        _span(q_pieces, {a for a, _ in live}), _span(k_pieces, {b for _, b in live}), live
    )


def ring_work(cp_rank: int, cp: int, tokens: int, layout: str) -> int:
    """(query block, key block) pairs that rank ``cp_rank``'s ring computes and a causal mask
    does not wholly hide, blocks being the ``2·cp`` equal runs of a ``tokens``-long row: the
    steps the ring takes, each planned by `block_plan` as the ring plans it."""
    unit = tokens // (2 * cp)
    mine = chunk_pieces(cp_rank, cp, tokens, layout)
    count = 0
    for step in range(cp):
        theirs = chunk_pieces((cp_rank - step) % cp, cp, tokens, layout)
        plan = block_plan(mine, theirs)
        if plan is None:
            continue
        q_units = _units(mine, plan.rows, unit)
        k_units = _units(theirs, plan.cols, unit)
        count += sum(1 for q in q_units for k in k_units if _live(q, k))
    return count


def _units(pieces: Pieces, part: slice, unit: int) -> list[tuple[int, int]]:
    """The row ranges of the ``unit``-long runs a local slice of a chunk holds."""
    index = [i for a, b in pieces for i in range(a, b)][part]
    return [(index[i], index[i] + unit) for i in range(0, len(index), unit)]


def _scores(
    q: torch.Tensor,
    k: torch.Tensor,
    allowed: torch.Tensor,
    scaling: float,
    groups: int,
) -> torch.Tensor:
    """Masked scores (B, Hkv, G, Tq, Tk) of one block: q (B, Hkv, G·Tq, D) against k (B, Hkv,
    Tk, D); ``allowed`` (B, Tq, Tk) says which query sees which key."""
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(scaling)
    batch, kv_heads, _, tk = scores.shape
    tq = allowed.shape[1]
    scores = scores.view(batch, kv_heads, groups, tq, tk)
    scores.masked_fill_(~allowed[:, None, None], torch.finfo(scores.dtype).min)
    return scores


def _allowed(
    doc_q: torch.Tensor, doc_k: torch.Tensor, at_q: torch.Tensor, at_k: torch.Tensor
) -> torch.Tensor:
    """(B, Tq, Tk): same document, and the key at or before the query in the row."""
    return (doc_q[:, :, None] == doc_k[:, None, :]) & (at_q[:, None] >= at_k[None, :])[None]


class _RingAttention(torch.autograd.Function):
    """Causal attention of this rank's queries over every chunk's keys and values (module doc).

    q is (B, Hkv, G, T, D): the query heads grouped per KV head."""

    @staticmethod
    def forward(ctx, q, k, v, doc, cpg, scaling, layout):  # type: ignore[override]
        rank, size = cpg.rank, cpg.size
        batch, kv_heads, groups, tokens, head_dim = q.shape
        row = tokens * size
        mine = chunk_pieces(rank, size, row, layout)
        at = chunk_index(rank, size, row, layout, q.device)
        out = torch.zeros_like(q)
        lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
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
            plan = block_plan(mine, chunk_pieces(j, size, row, layout))
            if step == 0 and (plan is None or plan.rows != slice(0, tokens)):
                raise AssertionError("the diagonal block must hold every query")
            if plan is not None:
                rows, cols = plan.rows, plan.cols
                at_j = chunk_index(j, size, row, layout, q.device)
                allowed = _allowed(doc[:, rows], doc_j[:, cols], at[rows], at_j[cols])
                q_b = q[:, :, :, rows].reshape(batch, kv_heads, -1, head_dim)
                scores = _scores(q_b, k_j[:, :, cols], allowed, scaling, groups)
                lse_b = torch.logsumexp(scores, dim=-1)  # (B, Hkv, G, tq)
                p = scores.sub_(lse_b[..., None]).exp_()
                out_b = torch.matmul(p.flatten(2, 3), v_j[:, :, cols]).view_as(out[:, :, :, rows])
                if step == 0:
                    out, lse = out_b, lse_b
                else:
                    lse_a = lse[:, :, :, rows]
                    merged = torch.logaddexp(lse_a, lse_b)
                    out_a = out[:, :, :, rows] * (lse_a - merged).exp_()[..., None]
                    out[:, :, :, rows] = out_a.addcmul_(out_b, (lse_b - merged).exp_()[..., None])
                    lse[:, :, :, rows] = merged
            if pending is not None:
                pending.wait()
                k_j, v_j, doc_j = nxt
        ctx.save_for_backward(q, k, v, doc, out, lse)
        ctx.cpg, ctx.scaling, ctx.layout = cpg, scaling, layout
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, doc, out, lse = ctx.saved_tensors
        cpg, scaling, layout = ctx.cpg, ctx.scaling, ctx.layout
        rank, size = cpg.rank, cpg.size
        batch, kv_heads, groups, tokens, head_dim = q.shape
        row = tokens * size
        mine = chunk_pieces(rank, size, row, layout)
        at = chunk_index(rank, size, row, layout, q.device)
        grad_out = grad_out.contiguous()
        delta = (grad_out * out).sum(-1)  # rowsum(dO ⊙ O): (B, Hkv, G, T)
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
            plan = block_plan(mine, chunk_pieces(j, size, row, layout))
            grads = None
            if plan is not None:
                rows, cols = plan.rows, plan.cols
                at_j = chunk_index(j, size, row, layout, q.device)
                allowed = _allowed(doc[:, rows], doc_j[:, cols], at[rows], at_j[cols])
                q_b = q[:, :, :, rows].reshape(batch, kv_heads, -1, head_dim)
                k_b, v_b = k_j[:, :, cols], v_j[:, :, cols]
                scores = _scores(q_b, k_b, allowed, scaling, groups)
                p = scores.sub_(lse[:, :, :, rows, None]).exp_()  # (B, Hkv, G, tq, tk)
                go = grad_out[:, :, :, rows].reshape(batch, kv_heads, -1, head_dim)
                p2 = p.flatten(2, 3)
                dv_b = torch.matmul(p2.transpose(-1, -2), go)
                ds = torch.matmul(go, v_b.transpose(-1, -2)).view_as(p)
                ds = ds.sub_(delta[:, :, :, rows, None]).mul_(p).flatten(2, 3)
                dq[:, :, :, rows] += torch.matmul(ds, k_b).mul_(scaling).view_as(dq[:, :, :, rows])
                dk_b = torch.matmul(ds.transpose(-1, -2), q_b).mul_(scaling)
                grads = (cols, dk_b, dv_b)
            if dkv_pending is None:  # this rank's own chunk: its accumulators start here
                dk_j, dv_j = torch.zeros_like(k_j), torch.zeros_like(v_j)
            else:
                dkv_pending.wait()
                dk_j, dv_j = dkv_next
            if grads is not None:
                cols, dk_b, dv_b = grads
                dk_j[:, :, cols] += dk_b
                dv_j[:, :, cols] += dv_b
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
    layout: str = LAYOUT,
) -> torch.Tensor:
    """Causal attention of this rank's chunk over the whole sequence held by the cp group.

    ``query`` (B, H, Tc, D), ``key``/``value`` (B, Hkv, Tc, D) with H a multiple of Hkv,
    ``position_ids`` (B or 1, Tc) of the chunk (packed documents restart at 0), cut from the row
    under ``layout``. Returns (B, Tc, H, D) in ``query``'s dtype (transformers'
    attention-output layout)."""
    batch, heads, tokens, head_dim = query.shape
    kv_heads = key.shape[1]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads are not a multiple of {kv_heads} KV heads")
    groups = heads // kv_heads
    scale = float(scaling) if scaling is not None else head_dim**-0.5
    at = chunk_index(cpg.rank, cpg.size, tokens * cpg.size, layout, query.device)
    doc = (at - position_ids.to(query.device).expand(batch, tokens)).contiguous()
    f32 = torch.float32
    with torch.autocast(query.device.type, enabled=False):
        q = query.to(f32).reshape(batch, kv_heads, groups, tokens, head_dim)
        out = _RingAttention.apply(
            q.contiguous(),
            key.to(f32).contiguous(),
            value.to(f32).contiguous(),
            doc,
            cpg,
            scale,
            layout,
        )
    out = out.reshape(batch, heads, tokens, head_dim).transpose(1, 2).contiguous()
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
    layout = getattr(module, "cp_layout", LAYOUT)
    return ring_attention(query, key, value, position_ids, cpg, scaling, layout), None


def enable_ring_attention(
    model: torch.nn.Module,
    group: ProcessGroup,
    comm: CommRecorder,
    dim: str = "cp",
    layout: str = LAYOUT,
) -> torch.nn.Module:
    """Make every `LlamaAttention` in ``model`` (a whole model or a pipeline stage) attend with
    the ring over ``group`` (in place), recording messages on ``dim`` in ``comm``; each rank
    holds its chunk under ``layout`` (zigzag unless told).

    Feed each rank its chunk with its ``position_ids`` (`split_sequence` with the same
    layout); without them transformers would number the chunk from 0 and rotary positions
    would be wrong."""
    AttentionInterface.register(ATTENTION_NAME, ring_attention_forward)
    cpg = CPGroup.of(group, comm, dim)
    found = False
    for module in model.modules():
        if isinstance(module, LlamaAttention):
            module.context_parallel = cpg
            module.cp_layout = layout
            module.config._attn_implementation = ATTENTION_NAME
            found = True
    if not found:
        raise ValueError("enable_ring_attention: the model has no LlamaAttention modules")
    config = getattr(model, "config", None)
    if config is not None:
        config._attn_implementation = ATTENTION_NAME
    return model
