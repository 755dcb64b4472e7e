"""Mamba-1's selective scan (CPU and CUDA): exact, with a hand-written, memory-light backward.

Why our own: the fast selective-scan kernels (`mamba-ssm`, `causal-conv1d`) are CUDA only (and
need a build with nvcc, see `greenbench.models.mamba.scan_triton`), and transformers'
pure-PyTorch fallback (`modeling_mamba.mamba_selective_scan`) materialises the
discretised A and B·u for the whole sequence, then steps through time with a Python loop whose
every step adds autograd nodes. On 2 CPU cores a tiny Mamba then trains ~80x slower than the
Transformer of the same size, which would turn a Transformer-vs-Mamba energy comparison into a
comparison of code paths.

The recurrence, per batch b, channel d and state n (A is (D, N); B, C are (N,) per batch and step):

    h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t u_t B_t        y_t = Σ_n C_t[n] h_t[·, n]

Three implementations compute it, with the same saved states and the same backward:

* On CPU, a C kernel (`scan_kernel.c`, built at first use and loaded by
  `greenbench.models.mamba.scan_native`; the ``model.scan`` setting picks the path). One call per
  direction, OpenMP over (batch, block of channels), each block's N states in L1 and the
  channel loops vectorised. It exists because the torch version below spends its time in
  operator dispatch (~20 ops per step, ~9 µs each), not arithmetic. Measured on the 2-core
  reference machine (2 threads), one layer of the ``tiny`` preset at batch 8 × 1024 (D 512,
  N 16), forward + backward through `selective_scan`: ~0.2 s with the torch steps, ~0.04 s with
  the kernel (~0.012 s forward); the Mamba training step went from ~2.1x to ~1.1x the
  Transformer's (``benchmarks/step_time.py``). Results match the torch version to float32
  rounding (the kernel's exp is a polynomial within 1.3 ulp, and its sums run in another order).
* On CUDA, with ``backend="triton"`` (what ``model.scan: auto`` resolves to there when
  mamba-ssm cannot be imported), Triton kernels of the same structure
  (`greenbench.models.mamba.scan_triton`); on CPU tensors only under Triton's interpreter
  (``TRITON_INTERPRET=1``), which is how they are tested.
* Elsewhere (CUDA tensors unless ``backend="triton"``, ``model.scan=torch``, or when the C
  kernel cannot be built under ``auto``: then one warning is logged), the torch stepping
  implementation below, kept as the reference and fallback. It is exact by construction and
  ~20x faster than transformers' fallback; how it is made fast without changing what is
  computed (the cost is passes over the B·T·N·D state numbers):

  - Time-major layout, states as (batch, N, D) with D innermost: each step's operands are
    contiguous and every reduction over N runs vectorised across D.
  - The recurrence is stepped exactly, a few fused ops per step on a working set of (batch, N, D)
    tensors that stays in cache. Variants that build a chunk of steps in bulk measured slower
    (their buffers fall out of cache), and a closed form with ``exp(±cumsum(ΔA))`` needs more
    passes still and overflows float32 once Δ·A accumulates past ~88 within a chunk; stepping
    has neither issue (nor have the kernels, which step too).

No autograd graph inside the scan, on any path. Forward keeps only its inputs and the state at
the start of every ``chunk_size`` steps. Backward walks chunks in reverse: it replays one chunk's
states from its saved start, then runs the adjoint recurrence
``g_t = C_t gy_t + exp(Δ_{t+1} A) ⊙ g_{t+1}`` backwards through it, forming every input gradient
on the way. Extra memory is ``T / chunk_size`` states, i.e. ``N / chunk_size`` times the size of
``u``.

The torch path's per-step Python overhead is fixed, so it is relatively slower at small batch ×
width. The Mamba mixer around the scan (projections, causal conv, Δ softplus, D skip, z gate)
stays in ordinary autograd (fusing those into the hand-written backward measured no faster); see
`greenbench.models.mamba.model`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from greenbench.errors import KernelUnavailable
from greenbench.models.mamba.card import SCAN_CHUNK
from greenbench.models.mamba.scan_native import native_kernel

DEFAULT_CHUNK_SIZE = SCAN_CHUNK
BACKENDS = ("auto", "native", "torch", "triton")

if TYPE_CHECKING:
    from greenbench.models.mamba.scan_triton import TritonKernel


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    backend: str = "auto",
) -> torch.Tensor:
    """Return ``y`` with ``y[t, b, d] = Σ_n C[t, b, n] h_t[b, d, n]`` (see module docstring).

    Time-major shapes: ``u``, ``delta``: (time, batch, D), ``delta`` already softplus-ed;
    ``A``: (D, N), negative; ``B``, ``C``: (time, batch, N). Returns (time, batch, D) in ``u``'s
    dtype. The initial state is zero, as in mamba-ssm's kernel and transformers' training path.
    Computation runs in float32, like transformers' reference, which discretises in float32 too.
    ``chunk_size`` (steps between saved states) trades backward memory against little speed.
    ``backend`` is ``native`` (the C kernel, required; CPU tensors, others use torch), ``torch``
    (the stepping implementation), ``auto`` (the C kernel for CPU tensors when it builds, else
    torch) or ``triton`` (the Triton kernels: CUDA tensors, or CPU tensors under Triton's
    interpreter; `KernelUnavailable` otherwise or when triton cannot be imported).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    f32 = torch.float32
    kernel = None  # the torch steps, unless a kernel scans these (non-empty) inputs
    if u.numel() and A.numel():
        if backend == "triton":
            kernel = _triton_kernel(u.device)
        elif backend != "torch" and u.device.type == "cpu":
            kernel = native_kernel(required=backend == "native")
    with torch.autocast(u.device.type, enabled=False):  # the scan always runs in float32
        y = _SelectiveScan.apply(
            u.to(f32).contiguous(),
            delta.to(f32).contiguous(),
            A.to(f32).contiguous(),
            B.to(f32).contiguous(),
            C.to(f32).contiguous(),
            chunk_size,
            kernel,
        )
    return y.to(u.dtype)


def _triton_kernel(device: torch.device) -> TritonKernel:
    """The Triton kernels for tensors on ``device``; triton is imported only here, so machines
    without it still import greenbench."""
    try:
        from greenbench.models.mamba.scan_triton import triton_kernel
    except ImportError as exc:
        raise KernelUnavailable(
            f"the Triton selective scan needs triton, which cannot be imported ({exc}); "
            "install triton or use the torch scan"
        ) from exc
    return triton_kernel(device)


def _steps(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, ...]:
    """Per-step views of a time-major tensor with a size-1 axis inserted at ``dim``, to broadcast
    against (batch, N, D) states. Unbinding once keeps indexing out of the step loops."""
    return x.unsqueeze(dim).unbind(0)


class _SelectiveScan(torch.autograd.Function):
    """The scan with its hand-written backward; ``kernel`` is the native kernel (CPU), the
    Triton kernel, or None for the torch stepping implementation. All save the same states
    (see module doc)."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, chunk_size, kernel):  # type: ignore[override]
        if kernel is None:
            y, starts = _scan_states(u, delta, A, B, C, chunk_size)
        else:
            y, starts = kernel.forward(u, delta, A, B, C, chunk_size)
        ctx.save_for_backward(u, delta, A, B, C, starts)
        ctx.chunk_size = chunk_size
        ctx.kernel = kernel
        return y

    @staticmethod
    def backward(ctx, gy):  # type: ignore[override]
        u, delta, A, B, C, starts = ctx.saved_tensors
        with torch.autocast(gy.device.type, enabled=False):
            if ctx.kernel is not None:
                grads = ctx.kernel.backward(u, delta, A, B, C, starts, gy.float(), ctx.chunk_size)
                return (*grads, None, None)
            S, gdA, gA, gB, gC = _scan_grads(u, delta, A, B, C, starts, gy.float(), ctx.chunk_size)
            gu = delta * S
            gdelta = gdA.addcmul_(u, S)
        return gu, gdelta, gA, gB, gC, None, None


def _scan_states(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward recurrence. Returns y (time, batch, D) and the state before every chunk."""
    seq_len, batch, D = u.shape
    N = A.shape[1]
    A_t = A.t().contiguous()  # (N, D)
    delta_s = _steps(delta, -2)  # (batch, 1, D) per step
    du_s = _steps(delta * u, -2)  # (batch, 1, D)
    B_s = _steps(B, -1)  # (batch, N, 1)
    C_s = _steps(C, -2)  # (batch, 1, N)
    starts = u.new_empty((seq_len + chunk_size - 1) // chunk_size, batch, N, D)
    h = u.new_zeros(batch, N, D)
    dA = torch.empty_like(h)
    dBu = torch.empty_like(h)
    y = u.new_empty(seq_len, batch, 1, D)
    y_s = y.unbind(0)
    for t in range(seq_len):
        if t % chunk_size == 0:
            starts[t // chunk_size].copy_(h)
        torch.mul(delta_s[t], A_t, out=dA)
        dA.exp_()
        torch.mul(B_s[t], du_s[t], out=dBu)
        torch.addcmul(dBu, dA, h, out=h)  # h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t u_t B_t
        torch.bmm(C_s[t], h, out=y_s[t])  # y_t = C_t · h_t
    return y.view(seq_len, batch, D), starts


def _scan_grads(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    starts: torch.Tensor,
    gy: torch.Tensor,
    chunk_size: int,
) -> tuple[torch.Tensor, ...]:
    """Backward of `_scan_states` for upstream gradient ``gy`` (time, batch, D).

    Returns S = Σ_n B_t g_t (time, batch, D), Σ_n A ⊙ dL/d(Δ_t A) (time, batch, D), dL/dA (D, N),
    dL/dB and dL/dC (time, batch, N); dL/du = Δ S and dL/dΔ = the second + u S are left to the
    caller.
    """
    seq_len, batch, D = u.shape
    N = A.shape[1]
    A_t = A.t().contiguous()
    delta_s = _steps(delta, -2)  # (batch, 1, D)
    du_s = _steps(delta * u, -2)  # (batch, 1, D)
    B_col, B_row = _steps(B, -1), _steps(B, -2)  # (batch, N, 1), (batch, 1, N)
    C_col = _steps(C, -1)  # (batch, N, 1)
    gy_s = _steps(gy.contiguous(), -2)  # (batch, 1, D)
    # Per-step results, time-major, written through one (batch, 1, F) view per step.
    S = u.new_empty(seq_len, batch, 1, D)
    gdA = u.new_empty(seq_len, batch, 1, D)
    gB = u.new_empty(seq_len, batch, 1, N)
    gC = u.new_empty(seq_len, batch, 1, N)
    S_s, gdA_s, gB_s, gC_s = S.unbind(0), gdA.unbind(0), gB.unbind(0), gC.unbind(0)
    gA_acc = u.new_zeros(batch, N, D)
    ones = u.new_ones(batch, 1, N)
    # One chunk's replayed states (H[0] = state before the chunk) and decays.
    H = u.new_empty(chunk_size + 1, batch, N, D).unbind(0)
    dA = u.new_empty(chunk_size, batch, N, D).unbind(0)
    G = u.new_empty(batch, N, D)  # g_t = dL/dh_t, total
    M = u.new_zeros(batch, N, D)  # exp(Δ_{t+1} A) ⊙ g_{t+1}, carried backwards in time
    W = torch.empty_like(G)  # dL/d(Δ_t A)
    for i in reversed(range(starts.shape[0])):
        c0 = i * chunk_size
        n = min(chunk_size, seq_len - c0)
        H[0].copy_(starts[i])
        for k in range(n):  # replay the chunk forwards
            t = c0 + k
            torch.mul(delta_s[t], A_t, out=dA[k])
            dA[k].exp_()
            torch.mul(B_col[t], du_s[t], out=H[k + 1])
            H[k + 1].addcmul_(dA[k], H[k])
        for k in reversed(range(n)):  # adjoint recurrence, backwards in time
            t = c0 + k
            torch.addcmul(M, C_col[t], gy_s[t], out=G)  # g_t = C_t gy_t + M
            # Contractions over D as (1, D) @ (D, N): far faster than (N, D) @ (D, 1) here.
            torch.bmm(gy_s[t], H[k + 1].transpose(1, 2), out=gC_s[t])
            torch.bmm(du_s[t], G.transpose(1, 2), out=gB_s[t])
            torch.bmm(B_row[t], G, out=S_s[t])
            torch.mul(dA[k], G, out=M)
            torch.mul(M, H[k], out=W)  # W = g_t ⊙ exp(Δ_t A) ⊙ h_{t-1}
            gA_acc.addcmul_(W, delta_s[t])
            W.mul_(A_t)
            torch.bmm(ones, W, out=gdA_s[t])  # Σ_n, as a (1, N) @ (N, D) product
    return (
        S.view(seq_len, batch, D),
        gdA.view(seq_len, batch, D),
        gA_acc.sum(0).t(),
        gB.view(seq_len, batch, N),
        gC.view(seq_len, batch, N),
    )
