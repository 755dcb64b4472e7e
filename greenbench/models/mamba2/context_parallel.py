"""Mamba-2's context-parallel form: each rank scans its chunk of the sequence; the conv's halo
and the SSD scan's state cross ranks, as in Mamba-1's (`greenbench.models.mamba.context_parallel`,
whose two point-to-point autograd Functions, `Halo` and `StateChain`, this reuses).

A Mamba-2 mixer mixes tokens in two places, and each needs one thing from earlier chunks:

1. The causal depthwise conv (kernel K) over x, B and C needs the previous chunk's last K − 1
   pre-conv inputs (``xBC``, all ``d_inner + 2·G·N`` channels): the halo, sent to the next rank
   (rank 0 gets zeros, the conv's own padding); its gradient goes back the same way.
2. The SSD recurrence ``S_t = exp(dt_t A) S_{t−1} + (dt_t x_t) B_tᵀ``, ``y_t = S_t C_t``
   (`greenbench.models.mamba2.ssd`) needs the state at the chunk's start, S0 (batch, H, P, N).
   It is linear in S, so every rank first scans its chunk from the zero state, all ranks at
   once, on the mixer's own backend, which also returns the chunk's final state S_local
   (`ssd_scan`'s ``return_final_state``; mamba-ssm and fla return theirs too:
   `greenbench.models.mamba2.kernels`). Then, with ``cs_t = Σ_{s≤t} dt_s A`` (per head, ≤ 0)
   over the rank's chunk:

       y_t += exp(cs_t) · (S0 C_t),       S_end = exp(cs_T) · S0 + S_local.

   The correction is one (T × N)·(N × heads-per-group · P) product per group — the SSD scan's
   own step 4 over the whole chunk — so unlike Mamba-1's (whose decay is per channel and state,
   a (T, B, D, N) tensor) it needs no time slicing or checkpointing.

Passing states between ranks is Mamba-1's sequential chain: rank r receives S0 from r − 1 and
sends S_end on; backward runs it in reverse with the state's gradient. Why a chain and not
``initial_state`` handed to each rank's scan (which the backends also accept): the heavy scans
then run on all ranks at once, and only the elementwise fold and the cheap correction wait for
the neighbour; a scan started from the received state would run the ranks' scans one after
another.

Recorded on the ``cp`` dimension: the halo and each state hop (``send`` / ``recv``), forward and
backward, as Mamba-1's. Gradients are exact (the messages are autograd Functions; the scans'
own backwards differentiate the final state).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.cp_group import CPGroup
from greenbench.models.mamba.context_parallel import Halo, StateChain, reclass_mixers
from greenbench.models.mamba2.kernels import scan_function
from greenbench.models.mamba2.model import SSDMamba2Mixer

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


def initial_state_response(cs: torch.Tensor, C: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """The scan's output from initial state ``h0`` with no input: ``exp(cs_t) · (h0 C_t)``.

    ``cs`` (batch, T, H) is the running sum of ``dt · A``, ``C`` (batch, T, G, N), ``h0``
    (batch, H, P, N); returns (batch, T, H, P) in ``h0``'s dtype."""
    batch, steps, heads = cs.shape
    groups, state = C.shape[2], C.shape[3]
    head_dim = h0.shape[2]
    h0_groups = h0.reshape(batch, groups, (heads // groups) * head_dim, state)
    out = C.to(h0.dtype).transpose(1, 2) @ h0_groups.transpose(-1, -2)  # (b, G, T, hg·P)
    out = out.transpose(1, 2).reshape(batch, steps, heads, head_dim)
    return out * cs.exp().unsqueeze(-1)


class ContextParallelMamba2Mixer(SSDMamba2Mixer):
    """`SSDMamba2Mixer` over one chunk of a sequence split across a cp group (module doc); the
    group is the ``context_parallel`` attribute. The same function of the whole sequence as the
    plain mixer, computed chunk by chunk: only its conv and its scan differ."""

    context_parallel: CPGroup

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):  # type: ignore[override]
        if cache_params is not None:
            raise NotImplementedError("context-parallel Mamba-2 does not generate with a cache")
        if hidden_states.shape[1] < self.conv_kernel_size - 1:
            raise ValueError(
                f"a context-parallel chunk of {hidden_states.shape[1]} tokens is shorter than "
                f"the conv's halo ({self.conv_kernel_size - 1})"
            )
        return super().forward(hidden_states, attention_mask=attention_mask, **kwargs)

    def conv(self, xBC: torch.Tensor) -> torch.Tensor:
        """The causal conv over this chunk, its first K − 1 inputs' window reaching into the
        previous chunk through the halo."""
        kernel = self.conv_kernel_size
        if kernel == 1:
            return super().conv(xBC)
        halo = Halo.apply(xBC[:, -(kernel - 1) :].contiguous(), self.context_parallel)
        return super().conv(torch.cat([halo, xBC], 1))[:, kernel - 1 :]

    def scan(
        self, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
    ) -> torch.Tensor:
        """This chunk's scan from the zero state, corrected for the start state the chain
        brings (module doc)."""
        cpg = self.context_parallel
        scan = scan_function(self.scan_backend, x.device.type)
        y, h_local = scan(x, dt, A, B, C, chunk_size=self.chunk_size, return_final_state=True)
        with torch.autocast(x.device.type, enabled=False):  # the decays are float32
            cs = (dt.float() * A.float()).cumsum(1)  # (b, T, H)
            h_local = h_local.float().contiguous()
            decay = cs[:, -1].exp()[:, :, None, None].expand_as(h_local)  # exp(cs_T)
            h0 = StateChain.apply(decay, h_local, cpg)
            if cpg.rank == 0:  # h0 = 0; the zero-weighted term keeps the chain in the graph,
                return y.float() + 0.0 * h0.sum()  # so its backward passes rank 1's gradient on
            return y.float() + initial_state_response(cs, C, h0)


def enable_cp_scan(
    model: torch.nn.Module,
    group: ProcessGroup,
    comm: CommRecorder,
    dim: str = "cp",
    layout: str = "contiguous",
) -> torch.nn.Module:
    """Re-class every Mamba-2 mixer in ``model`` (a whole model or a pipeline stage) as
    `ContextParallelMamba2Mixer` over ``group`` (in place), recording messages on ``dim`` in
    ``comm``; each rank then runs its `split_sequence` chunk. Contiguous chunks only, as for
    Mamba: the state passes from each chunk to the next in row order (ValueError otherwise)."""
    return reclass_mixers(
        model, (Mamba2Mixer, SSDMamba2Mixer), ContextParallelMamba2Mixer,
        (group, comm, dim), layout, "Mamba-2",
    )  # fmt: skip
