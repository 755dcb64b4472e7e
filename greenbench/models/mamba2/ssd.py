"""Mamba-2's scan in plain torch: the chunked state-space-duality (SSD) algorithm, all matmuls.

The recurrence, per batch b and head h, with a P × N state S (P = head dim, N = state size)::

    S_t = exp(dt_t A) S_{t-1} + (dt_t x_t) B_tᵀ        y_t = S_t C_t

A is one negative scalar per head, dt_t one positive step per head and token, x_t the head's P
channels, and B_t, C_t N-vectors shared by the heads of a group. SSD (Dao & Gu 2024, "Transformers
are SSMs", section 6) computes it in chunks of Q tokens. With ``a_t = dt_t A`` and ``cs`` its
cumulative sum inside the chunk (``cs[l] = a_0 + … + a_l``):

1. within a chunk, the quadratic (attention-like) form
   ``Y_diag = (C Bᵀ ⊙ L) (dt·x)`` with the causal decay mask ``L[l, s] = exp(cs[l] − cs[s])``
   for ``s ≤ l`` (0 above the diagonal): one (Q × N)·(N × Q) product per group, shared by its
   heads, then one (Q × Q)·(Q × P) product per head;
2. each chunk's contribution to the state at its end, kept transposed (N × P per head):
   ``Bᵀ (dt·x ⊙ exp(cs[Q−1] − cs))``, one (N × Q)·(Q × heads·P) product per group;
3. across chunks, the state recurrence ``S_start[c+1] = exp(cs_c[Q−1]) S_start[c] + states[c]``,
   stepped over the T / Q chunks (elementwise on the states, linear in T);
4. the start state's contribution to each token: ``Y_off = exp(cs) ⊙ (C S_start)``, one
   (Q × N)·(N × heads·P) product per group.

``y = Y_diag + Y_off``. Everything is a batched matmul or an elementwise op on chunk-sized
tensors, so it runs at GEMM speed on a CPU (and on a GPU without a custom kernel), and autograd
differentiates it (every step is a plain op, so the backward is the matching matmuls). The
products with B and C take a group's heads side by side as one wide matrix, in the token-major
layout the mixer produces, so with one group nothing is copied or repeated for them.

Why our own, not transformers' torch path (`modeling_mamba2.mamba2_chunk_scan`, what
`Mamba2Mixer` runs without mamba-ssm): it is the same algorithm, but it (a) repeats B and C to
every head before the C·Bᵀ product, so with one group it computes the same Q × Q product once
per head (H times the work and memory); (b) builds the decay mask through an expanded (…, Q, Q)
cumulative sum with two boolean masks; (c) passes states between chunks through a
(chunks × chunks) decay matrix, which grows quadratically with T / Q. Measured with
``benchmarks/mamba2_scan.py`` on the 2-core reference machine while other jobs ran (1 thread,
float32, minimum of 4 rounds), one layer of the ``tiny`` preset (8 heads × 64, N 64) at batch
4 × 1024, forward + backward of the scan alone: ours 0.18 s at Q = 32 or 64, 0.23 s at 128,
0.52 s at 256; transformers' 0.38 s at Q = 64 and 0.86 s at 256. The whole ``tiny`` training
step (8 layers, AdamW): 4.0 s with ours, 6.4 s with transformers' mixer on the same weights
(the Transformer 4.2 s, Mamba-1 3.2 s). transformers' mixer would have been usable (it trains
correctly without a cache), so the choice is speed alone.

Numerics: runs in float32 (as transformers' path and the CUDA kernels do for the decay terms),
whatever the inputs' dtype. ``cs[l] − cs[s]`` is taken as a difference of cumulative sums
inside one chunk, as mamba-ssm's kernels do; both are ≤ 0 where they are used, so nothing
overflows. Sequences that are not a multiple of Q are padded with ``dt = 0`` (no decay, no
input), which leaves every real token's output unchanged; the padding is cut off again.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DEFAULT_CHUNK_SIZE = 64


def ssd_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    initial_state: torch.Tensor | None = None,
    return_final_state: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``y`` of the Mamba-2 recurrence (module docstring), from a zero initial state unless
    ``initial_state`` is given.

    Shapes (batch-major, as transformers and mamba-ssm lay them out): ``x`` (batch, T, H, P);
    ``dt`` (batch, T, H), already through softplus (and its bias); ``A`` (H,), negative;
    ``B``, ``C`` (batch, T, G, N) with G dividing H (head h reads group ``h // (H / G)``).
    Returns (batch, T, H, P) in float32 (float64 for float64 inputs), the precision it
    computes in; the D skip and the gate are the caller's.

    States, in and out, are (batch, H, P, N), mamba-ssm's layout: ``initial_state`` is S_{-1},
    the state before the first token (it enters as the first chunk's start state, step 3);
    with ``return_final_state`` the state after the last real token is returned too, as
    ``(y, state)`` — the next chunk of the same sequence continues from it exactly (padding
    has dt = 0, so it leaves the state unchanged).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    batch, seq_len, heads, head_dim = x.shape
    groups, state = B.shape[2], B.shape[3]
    if heads % groups:
        raise ValueError(f"{groups} groups do not divide {heads} heads")
    Q = min(chunk_size, seq_len)
    pad = -seq_len % Q
    with torch.autocast(x.device.type, enabled=False):
        work = torch.promote_types(x.dtype, torch.float32)  # float32, or float64 when given
        x, dt, A, B, C = (t.to(work) for t in (x, dt, A, B, C))
        if pad:
            x, B, C = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (x, B, C))
            dt = F.pad(dt, (0, 0, 0, pad))  # dt = 0: no decay and no input on padding
        chunks, per_group = (seq_len + pad) // Q, heads // groups
        # Token-major inside a chunk, as the inputs come: (b, c, Q, G, heads per group · P).
        # A group's heads read one B and one C, so the products with B and C take the group's
        # heads side by side as one wide matrix (with one group: no copy, no repeat of B, C).
        xdt = (x * dt.unsqueeze(-1)).view(batch, chunks, Q, groups, per_group * head_dim)
        Bc = B.view(batch, chunks, Q, groups, state).transpose(2, 3)  # (b, c, G, Q, N)
        Cc = C.view(batch, chunks, Q, groups, state).transpose(2, 3)
        cs = (dt * A).view(batch, chunks, Q, heads).cumsum(2)  # (b, c, Q, H)
        # 1. inside each chunk, per head: (C Bᵀ ⊙ L) (dt x)
        CB = (Cc @ Bc.transpose(-1, -2)).unsqueeze(3)  # (b, c, G, 1, Q, Q)
        cs_h = cs.view(batch, chunks, Q, groups, per_group).permute(0, 1, 3, 4, 2)
        causal = torch.ones(Q, Q, dtype=torch.bool, device=x.device).tril()
        decay = (cs_h.unsqueeze(-1) - cs_h.unsqueeze(-2)).masked_fill(~causal, float("-inf"))
        x_heads = xdt.view(batch, chunks, Q, groups, per_group, head_dim).permute(0, 1, 3, 4, 2, 5)
        y_diag = (CB * decay.exp()) @ x_heads  # (b, c, G, hg, Q, P)
        y_diag = y_diag.permute(0, 1, 4, 2, 3, 5).reshape(batch, chunks, Q, heads, head_dim)
        if chunks == 1 and initial_state is None and not return_final_state:
            # one chunk from the zero state: nothing more to add
            return y_diag.view(batch, Q, heads, head_dim)[:, :seq_len]
        # 2. each chunk's state at its end, transposed (N × P per head):
        #    Bᵀ (dt x ⊙ exp(cs_end − cs))
        to_end = (cs[:, :, -1:] - cs).exp().unsqueeze(-1)  # (b, c, Q, H, 1)
        scaled = (xdt.view(batch, chunks, Q, heads, head_dim) * to_end).view_as(xdt)
        states = Bc.transpose(-1, -2) @ scaled.transpose(2, 3)  # (b, c, G, N, hg·P)
        # 3. across chunks: the state at each chunk's start (unbound once: indexing inside the
        # loop would cost a full-size zero gradient per step)
        chunk_decay = cs[:, :, -1].exp().view(batch, chunks, groups, 1, per_group, 1)
        chunk_decay = chunk_decay.expand(-1, -1, -1, -1, -1, head_dim).reshape(
            batch, chunks, groups, 1, per_group * head_dim
        )
        decays, chunk_states = chunk_decay.unbind(1), states.unbind(1)
        if initial_state is None:
            starts = [torch.zeros_like(chunk_states[0])]
        else:  # (b, H, P, N) -> (b, G, N, hg·P), the layout of the chunk states
            s0 = initial_state.to(work).reshape(batch, groups, per_group, head_dim, state)
            starts = [s0.permute(0, 1, 4, 2, 3).reshape_as(chunk_states[0])]
        for c in range(chunks - 1):
            starts.append(torch.addcmul(chunk_states[c], starts[-1], decays[c]))
        start = torch.stack(starts, 1)  # (b, c, G, N, hg·P)
        # 4. the start state's contribution: exp(cs) ⊙ (C S_start)
        y_off = (Cc @ start).transpose(2, 3).reshape(batch, chunks, Q, heads, head_dim)
        y = torch.addcmul(y_diag, y_off, cs.exp().unsqueeze(-1))
        y = y.reshape(batch, chunks * Q, heads, head_dim)[:, :seq_len]
        if not return_final_state:
            return y
        final = torch.addcmul(chunk_states[-1], starts[-1], decays[-1])  # (b, G, N, hg·P)
        final = final.reshape(batch, groups, state, per_group, head_dim).permute(0, 1, 3, 4, 2)
        return y, final.reshape(batch, heads, head_dim, state)
