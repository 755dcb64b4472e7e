"""Mamba's context-parallel form: each rank scans its chunk; halo and scan state cross ranks.

A Mamba mixer mixes tokens in two places only, and each needs one thing from earlier chunks:

1. The causal depthwise conv (kernel K) needs the last K − 1 pre-conv inputs of the previous
   chunk: a halo, sent point to point to the next rank (rank 0 gets zeros, the conv's own
   padding). Its gradient goes back the same way.
2. The selective scan h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t u_t B_t, y_t = C_t · h_t needs the state
   at the chunk's start, h0. The scan is linear in h, so each rank first scans its chunk from a
   zero state, all ranks at once, with greenbench's `selective_scan` (the C kernel on CPU),
   then corrects for h0:

       y_t += Σ_n C_t[n] · exp(S_t)[d, n] · h0[d, n],   S_t = (Σ_{s≤t} Δ_s) A   (≤ 0),
       h_end = exp(S_T) ⊙ h0 + h_local_end.

   h_local_end, the zero-start scan's final state, comes out of the same `selective_scan` call:
   N extra steps are appended with Δ = 0 (decay exp(0) = 1, input 0), whose C is the n-th unit
   vector at step n, so their outputs are the final state's columns — exact, and differentiated
   by the scan's own backward. The correction is computed in time slices under activation
   checkpointing, so no (T, B, D, N) tensor is kept for backward. Every exponent is ≤ 0:
   nothing overflows.

Passing states between ranks: a sequential point-to-point chain. Rank r receives h0_r from
r − 1, sends h_end_r = exp(S_T) ⊙ h0_r + h_local_end_r to r + 1, then applies its correction;
backward runs the chain in reverse (rank r receives dL/dh_end_r from r + 1 and sends
dL/dh0_r + exp(S_T) ⊙ dL/dh_end_r to r − 1). Chosen over an all-gather of (exp(S_T),
h_local_end) from every rank followed by a prefix fold: the chain moves one (B, D, N) state per
hop where the all-gather moves 2·cp of them to every rank (and its backward a reduction of as
many), while its latency is no worse than gloo's all-gather, itself a ring of cp − 1 steps; the
fold per hop is one elementwise multiply-add, and the heavy local scans run in parallel before it.

Recorded on the ``cp`` dimension: the halo (``send``/``recv``, forward and backward) and each
state hop (``send``/``recv``). A receive's time includes waiting for the neighbour to get
there, which a point-to-point record does not split off. All in autograd (three small
Functions around the messages), so gradients are exact; the scan itself runs on the mixer's
backend (the native C kernel or torch steps; ``mamba-ssm`` mixers use torch steps under CP).

Why our own: PyTorch's ``context_parallel`` covers SDPA attention only; nothing in it knows a
state-space scan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers.models.mamba.modeling_mamba import MambaMixer, apply_mask_to_padding_states

from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.cp_group import CPGroup, exchange
from greenbench.models.mamba.model import FastScanMambaMixer, causal_depthwise_conv1d
from greenbench.models.mamba.scan import selective_scan

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

#: numbers per time slice of the correction's (slice, B, D, N) temporaries
CORRECTION_SLICE = 1 << 22


class Halo(torch.autograd.Function):
    """The previous chunk's last K − 1 pre-conv inputs (zeros on rank 0), from this chunk's;
    any layout (Mamba-2's context-parallel mixer passes its batch-major ones)."""

    @staticmethod
    def forward(ctx, tail, cpg):  # type: ignore[override]
        ctx.cpg = cpg
        halo = torch.zeros_like(tail)
        sends = [(tail.contiguous(), cpg.next)] if cpg.rank < cpg.size - 1 else []
        recvs = [(halo, cpg.prev)] if cpg.rank > 0 else []
        exchange(cpg, sends, recvs).wait()
        return halo

    @staticmethod
    def backward(ctx, grad_halo):  # type: ignore[override]
        cpg = ctx.cpg
        grad_tail = torch.zeros_like(grad_halo)
        sends = [(grad_halo.contiguous(), cpg.prev)] if cpg.rank > 0 else []
        recvs = [(grad_tail, cpg.next)] if cpg.rank < cpg.size - 1 else []
        exchange(cpg, sends, recvs).wait()
        return grad_tail, None


class StateChain(torch.autograd.Function):
    """h0 of this chunk from the previous rank; sends h_end = decay ⊙ h0 + h_local on.
    ``decay`` has ``h_local``'s shape (Mamba-2's context-parallel mixer passes its per-head
    decay expanded to the state)."""

    @staticmethod
    def forward(ctx, decay, h_local, cpg):  # type: ignore[override]
        h0 = torch.zeros_like(h_local)
        if cpg.rank > 0:
            exchange(cpg, recvs=[(h0, cpg.prev)]).wait()
        if cpg.rank < cpg.size - 1:
            exchange(cpg, sends=[(torch.addcmul(h_local, decay, h0), cpg.next)]).wait()
        ctx.save_for_backward(decay, h0)
        ctx.cpg = cpg
        return h0

    @staticmethod
    def backward(ctx, grad_h0):  # type: ignore[override]
        decay, h0 = ctx.saved_tensors
        cpg = ctx.cpg
        grad_end = torch.zeros_like(h0)  # dL/dh_end: nothing reads the last chunk's end
        if cpg.rank < cpg.size - 1:
            exchange(cpg, recvs=[(grad_end, cpg.next)]).wait()
        if cpg.rank > 0:
            grad_prev_end = torch.addcmul(grad_h0, decay, grad_end)
            exchange(cpg, sends=[(grad_prev_end.contiguous(), cpg.prev)]).wait()
        return grad_end * h0, grad_end, None


def _response(
    cum: torch.Tensor, A: torch.Tensor, C: torch.Tensor, h0: torch.Tensor
) -> torch.Tensor:
    """y[t, b, d] = Σ_n C[t, b, n] · exp(cum[t, b, d] · A[d, n]) · h0[b, d, n]."""
    weighted = torch.exp(cum.unsqueeze(-1) * A) * h0  # (t, B, D, N)
    return torch.matmul(weighted, C.unsqueeze(-1)).squeeze(-1)


def initial_state_response(
    cum: torch.Tensor, A: torch.Tensor, C: torch.Tensor, h0: torch.Tensor
) -> torch.Tensor:
    """The scan's output from initial state ``h0`` with no input: ``cum`` (T, B, D) is the
    running sum of Δ, ``A`` (D, N), ``C`` (T, B, N), ``h0`` (B, D, N); returns (T, B, D).

    Computed in time slices of at most `CORRECTION_SLICE` numbers; under autograd each slice is
    checkpointed (recomputed in backward), so memory stays that of one slice."""
    steps, batch, channels = cum.shape
    size = max(1, CORRECTION_SLICE // max(1, batch * channels * A.shape[1]))
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (cum, A, C, h0))
    parts = []
    for start in range(0, steps, size):
        part = (cum[start : start + size], A, C[start : start + size], h0)
        if grad:
            parts.append(checkpoint(_response, *part, use_reentrant=False))
        else:
            parts.append(_response(*part))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def scan_with_end_state(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *,
    chunk_size: int,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`selective_scan` from a zero state, and its final state (B, D, N), in one call: N steps
    with Δ = 0 appended, the n-th reading the state's column n through C = e_n."""
    steps, batch, channels = u.shape
    states = A.shape[1]
    f32 = torch.float32
    readout = torch.eye(states, device=u.device, dtype=f32)[:, None, :].expand(-1, batch, -1)
    y = selective_scan(
        torch.cat([u.to(f32), u.new_zeros(states, batch, channels, dtype=f32)]),
        torch.cat([delta.to(f32), delta.new_zeros(states, batch, channels, dtype=f32)]),
        A,
        torch.cat([B.to(f32), B.new_zeros(states, batch, states, dtype=f32)]),
        torch.cat([C.to(f32), readout]),
        chunk_size=chunk_size,
        backend=backend,
    )
    return y[:steps], y[steps:].permute(1, 2, 0).contiguous()


class ContextParallelMambaMixer(FastScanMambaMixer):
    """`FastScanMambaMixer` over one chunk of a sequence split across a cp group (module doc);
    the group is the ``context_parallel`` attribute. The same function of the whole sequence
    as the plain mixer, computed chunk by chunk."""

    context_parallel: CPGroup

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):  # type: ignore[override]
        if cache_params is not None:
            raise NotImplementedError("context-parallel Mamba does not generate with a cache")
        cpg = self.context_parallel
        dtype = hidden_states.dtype
        kernel = self.conv_kernel_size
        if hidden_states.shape[1] < kernel - 1:
            raise ValueError(
                f"a context-parallel chunk of {hidden_states.shape[1]} tokens is shorter than "
                f"the conv's halo ({kernel - 1})"
            )
        mask = None if attention_mask is None else attention_mask.t()  # (T, B)
        hidden = apply_mask_to_padding_states(hidden_states, attention_mask)
        hidden = hidden.transpose(0, 1).contiguous()  # (T, B, d_model)
        x, gate = self.in_projections(hidden)
        if kernel > 1:
            halo = Halo.apply(x[-(kernel - 1) :], cpg)
            conv = causal_depthwise_conv1d(
                torch.cat([halo, x]), self.conv1d.weight, self.conv1d.bias
            )
            conv = conv[kernel - 1 :]
        else:
            conv = causal_depthwise_conv1d(x, self.conv1d.weight, self.conv1d.bias)
        x = apply_mask_to_padding_states(self.act(conv), mask)
        time_step, B, C = torch.split(
            self.x_proj(x), [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1
        )
        delta = F.softplus(self.dt_proj(time_step))
        A = -torch.exp(self.A_log.float())
        backend = self.scan_backend if self.scan_backend != "mamba-ssm" else "auto"
        with torch.autocast(x.device.type, enabled=False):  # the scan's arithmetic is float32
            y, h_local = scan_with_end_state(
                x, delta, A, B, C, chunk_size=self.scan_chunk_size, backend=backend
            )
            cum = torch.cumsum(delta.float(), dim=0)  # (T, B, D)
            decay = torch.exp(cum[-1].unsqueeze(-1) * A)  # exp(S_T): (B, D, N)
            h0 = StateChain.apply(decay, h_local, cpg)
            if cpg.rank == 0:  # h0 = 0; the zero-weighted term keeps the chain in the graph,
                y = y + 0.0 * h0.sum()  # so its backward passes rank 1's gradient on
            else:
                y = y + initial_state_response(cum, A, C.float(), h0)
        y = y.to(x.dtype)
        y = (y + x * self.D) * F.silu(gate)
        return self.out_proj(y.to(dtype)).transpose(0, 1)


def enable_cp_scan(
    model: torch.nn.Module,
    group: ProcessGroup,
    comm: CommRecorder,
    dim: str = "cp",
    layout: str = "contiguous",
) -> torch.nn.Module:
    """Re-class every Mamba mixer in ``model`` (a whole model or a pipeline stage) as
    `ContextParallelMambaMixer` over ``group`` (in place), recording messages on ``dim`` in
    ``comm``; each rank then runs its `split_sequence` chunk. Contiguous chunks only: the scan
    passes its state from each chunk to the next in row order, so a load-balanced (zigzag)
    split, which gives a rank two distant runs, has no meaning here (ValueError)."""
    return reclass_mixers(
        model, (MambaMixer, FastScanMambaMixer), ContextParallelMambaMixer,
        (group, comm, dim), layout, "Mamba",
    )  # fmt: skip


def reclass_mixers(
    model: torch.nn.Module,
    kinds: tuple[type, ...],
    cp_class: type,
    over: tuple[ProcessGroup, CommRecorder, str],
    layout: str,
    family: str,
) -> torch.nn.Module:
    """Re-class every mixer of ``kinds`` (or already ``cp_class``) in ``model`` as ``cp_class``
    over the cp group ``over`` (group, recorder, dimension), in place: a state-space family's CP
    form (Mamba's, Mamba-2's). Contiguous chunks only (ValueError otherwise, before any group
    is touched), and a model without such mixers is a ValueError."""
    if layout != "contiguous":
        raise ValueError(f"the chunked {family} scan needs contiguous chunks, not {layout!r}")
    cpg = CPGroup.of(*over)
    found = False
    for module in model.modules():
        if type(module) in (*kinds, cp_class):
            module.__class__ = cp_class
            module.context_parallel = cpg
            found = True
    if not found:
        raise ValueError(f"enable_cp_scan: the model has no {family} mixers")
    return model
