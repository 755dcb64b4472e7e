"""Mamba-1's selective scan as Triton kernels (forward and hand-written backward), for CUDA.

Why our own: mamba-ssm's selective-scan kernels ship as source and need a CUDA build with nvcc;
without its compiled extension the package cannot be imported at all (``mamba_ssm/__init__``
imports ``selective_scan_cuda`` even for its Triton parts). What is left are per-step loops:
on an H100, Mamba 125m trained at 730 tokens/s on greenbench's torch stepping scan, 132x slower
than the Transformer of the same size (96,216), and transformers' own fallback is slower still
(136 tokens/s for a ~115M Mamba-1); an energy comparison would compare code paths. Triton comes
with the CUDA builds of torch, so with these kernels a plain ``pip install`` gets a fast
Mamba-1 on CUDA (how fast is not measured yet).

What it computes is exactly `greenbench.models.mamba.scan._scan_states` (forward: ``y`` and the
state before every ``chunk_size`` steps) and `greenbench.models.mamba.scan._scan_grads`
(backward, from those saved states), with the structure of the C kernel (``scan_kernel.c``):

* One program per (batch row, block of ``BLOCK_D`` channels); the block's (BLOCK_D, N) states
  live in registers and the program walks time sequentially.
* Forward: ``h = exp(Δ_t A) ⊙ h + Δ_t u_t B_t``, ``y_t = Σ_n C_t h``; the state is written out
  at the start of every chunk, so memory stays ``T / chunk_size`` states.
* Backward, chunks in reverse: replay the chunk from its saved start, writing the state before
  each step to a per-program scratch area in global memory (``chunk_size`` states, read back by
  the same program, a barrier in between), then run the adjoint recurrence
  ``g_t = C_t gy_t + exp(Δ_{t+1} A) ⊙ g_{t+1}`` backwards through the chunk. dL/du and dL/dΔ
  are per channel and written directly; the sums over channels (dL/dB_t, dL/dC_t) go to one
  partial buffer per channel block, dL/dA (a sum over time and batch) to one per batch row, and
  torch sums the partials afterwards: deterministic, no atomics.

Block width and warps (`BLOCK_D`, `STATES_PER_THREAD`) were chosen without a GPU at hand, not
tuned.

Tested on CPU through Triton's interpreter (``TRITON_INTERPRET=1`` set before this module is
imported: the kernels are then interpreted, on CPU tensors, with the CPU build of torch),
against the torch scan, outputs and gradients, on small shapes (``tests/models/
test_scan_triton.py``); the same file checks a realistic shape and a training step on a GPU.

This module imports triton at the top; `greenbench.models.mamba.scan` imports it only when
the ``triton`` backend is asked for, so machines without triton still import greenbench.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from greenbench.errors import KernelUnavailable
from greenbench.models.mamba.kernels import triton_interpreter_on
from greenbench.models.mamba.scan_native import check_scan_inputs

#: channels per program: a power of two (Triton block shapes are)
BLOCK_D = 32
#: state elements per thread that set the warps per program: one warp for Mamba's N = 16
STATES_PER_THREAD = 16


@triton.jit
def _forward_kernel(
    u_ptr,
    delta_ptr,
    A_ptr,
    B_ptr,
    C_ptr,
    y_ptr,
    starts_ptr,
    T,
    batch,
    D,
    N,
    chunk,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    n = tl.arange(0, BLOCK_N)
    d_ok = d < D
    n_ok = n < N
    tile_ok = d_ok[:, None] & n_ok[None, :]
    # Padding lanes load zeros: A = 0 and Δ = 0 there keep their states at 0.
    A = tl.load(A_ptr + d[:, None] * N + n[None, :], mask=tile_ok, other=0.0)
    state_offsets = n[None, :] * D + d[:, None]  # a (N, D) state, seen as (BLOCK_D, BLOCK_N)
    h = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)
    for c in range(tl.cdiv(T, chunk)):
        start = starts_ptr + (c * batch + b).to(tl.int64) * N * D
        tl.store(start + state_offsets, h, mask=tile_ok)
        for t in range(c * chunk, tl.minimum(c * chunk + chunk, T)):
            row = (t * batch + b).to(tl.int64)
            dl = tl.load(delta_ptr + row * D + d, mask=d_ok, other=0.0)
            du = dl * tl.load(u_ptr + row * D + d, mask=d_ok, other=0.0)
            Bt = tl.load(B_ptr + row * N + n, mask=n_ok, other=0.0)
            Ct = tl.load(C_ptr + row * N + n, mask=n_ok, other=0.0)
            h = tl.exp(dl[:, None] * A) * h + du[:, None] * Bt[None, :]
            y = tl.sum(h * Ct[None, :], axis=1)
            tl.store(y_ptr + row * D + d, y, mask=d_ok)


@triton.jit
def _backward_kernel(
    u_ptr,
    delta_ptr,
    A_ptr,
    B_ptr,
    C_ptr,
    starts_ptr,
    gy_ptr,
    gu_ptr,
    gdelta_ptr,
    gA_part_ptr,
    gB_part_ptr,
    gC_part_ptr,
    scratch_ptr,
    T,
    batch,
    D,
    N,
    chunk,
    scratch_steps,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    block = tl.program_id(1)
    d = block * BLOCK_D + tl.arange(0, BLOCK_D)
    n = tl.arange(0, BLOCK_N)
    d_ok = d < D
    n_ok = n < N
    tile_ok = d_ok[:, None] & n_ok[None, :]
    A = tl.load(A_ptr + d[:, None] * N + n[None, :], mask=tile_ok, other=0.0)
    state_offsets = n[None, :] * D + d[:, None]
    # This program's scratch: the state before each step of one chunk, dense (BLOCK_D, BLOCK_N).
    tile = tl.arange(0, BLOCK_D)[:, None] * BLOCK_N + n[None, :]
    program = (b * tl.num_programs(1) + block).to(tl.int64)
    work = scratch_ptr + program * scratch_steps * BLOCK_D * BLOCK_N
    M = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)  # exp(Δ_{t+1} A) ⊙ g_{t+1}
    gA = tl.zeros((BLOCK_D, BLOCK_N), dtype=tl.float32)
    n_chunks = tl.cdiv(T, chunk)
    for i in range(n_chunks):
        c = n_chunks - 1 - i
        c0 = c * chunk
        steps = tl.minimum(chunk, T - c0)
        start = starts_ptr + (c * batch + b).to(tl.int64) * N * D
        h = tl.load(start + state_offsets, mask=tile_ok, other=0.0)
        for k in range(steps):  # replay the chunk forwards, keeping each step's h_{t-1}
            tl.store(work + k * BLOCK_D * BLOCK_N + tile, h)
            row = ((c0 + k) * batch + b).to(tl.int64)
            dl = tl.load(delta_ptr + row * D + d, mask=d_ok, other=0.0)
            du = dl * tl.load(u_ptr + row * D + d, mask=d_ok, other=0.0)
            Bt = tl.load(B_ptr + row * N + n, mask=n_ok, other=0.0)
            h = tl.exp(dl[:, None] * A) * h + du[:, None] * Bt[None, :]
        tl.debug_barrier()  # the scratch writes are visible to the whole program
        for j in range(steps):  # adjoint recurrence, backwards in time; h is h_t
            k = steps - 1 - j
            t = c0 + k
            h_prev = tl.load(work + k * BLOCK_D * BLOCK_N + tile)
            row = (t * batch + b).to(tl.int64)
            dl = tl.load(delta_ptr + row * D + d, mask=d_ok, other=0.0)
            uv = tl.load(u_ptr + row * D + d, mask=d_ok, other=0.0)
            gy = tl.load(gy_ptr + row * D + d, mask=d_ok, other=0.0)
            Bt = tl.load(B_ptr + row * N + n, mask=n_ok, other=0.0)
            Ct = tl.load(C_ptr + row * N + n, mask=n_ok, other=0.0)
            g = Ct[None, :] * gy[:, None] + M  # g_t = dL/dh_t
            gC = tl.sum(gy[:, None] * h, axis=0)  # this block's part of Σ_d gy_t h_t
            gB = tl.sum((dl * uv)[:, None] * g, axis=0)  # ... of Σ_d Δ_t u_t g_t
            S = tl.sum(Bt[None, :] * g, axis=1)
            M = tl.exp(dl[:, None] * A) * g
            W = M * h_prev  # dL/d(Δ_t A)
            gA += W * dl[:, None]
            gd = tl.sum(W * A, axis=1)
            tl.store(gu_ptr + row * D + d, dl * S, mask=d_ok)
            tl.store(gdelta_ptr + row * D + d, gd + uv * S, mask=d_ok)
            part = (block * T + t).to(tl.int64) * batch + b
            tl.store(gB_part_ptr + part * N + n, gB, mask=n_ok)
            tl.store(gC_part_ptr + part * N + n, gC, mask=n_ok)
            h = h_prev
        tl.debug_barrier()  # every read of the scratch is done before the next chunk writes it
    gA_row = gA_part_ptr + b.to(tl.int64) * D * N
    tl.store(gA_row + d[:, None] * N + n[None, :], gA, mask=tile_ok)


#: whether the kernels above run in Triton's interpreter: `triton.jit` decided it (from
#: ``TRITON_INTERPRET``) when this module was imported
INTERPRETED: bool = not isinstance(_forward_kernel, triton.runtime.JITFunction)


def _launch_config(N: int) -> dict[str, int]:
    block_n = triton.next_power_of_2(N)
    warps = max(1, min(8, BLOCK_D * block_n // (32 * STATES_PER_THREAD)))
    return {"BLOCK_D": BLOCK_D, "BLOCK_N": block_n, "num_warps": warps}


def _on_device(x: torch.Tensor) -> contextlib.AbstractContextManager:
    """Triton launches on the current CUDA device: make it the tensors' one."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _check(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *more: torch.Tensor,
    chunk_size: int,
) -> None:
    """The kernels read raw memory: refuse what would make them read out of bounds."""
    check_scan_inputs(
        u, delta, A, B, C, *more, chunk_size=chunk_size,
        kernel="the Triton kernels take contiguous float32 tensors on one device",
        placed=lambda x: x.device == u.device,
    )  # fmt: skip


class TritonKernel:
    """The Triton scan behind `greenbench.models.mamba.scan.selective_scan` (``backend=
    "triton"``), with the interface of the native kernel: ``forward`` and ``backward`` on
    contiguous float32 tensors, the same saved states."""

    def forward(
        self,
        u: torch.Tensor,
        delta: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        chunk_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``y`` (T, batch, D) and the state before every chunk, (chunks, batch, N, D), as
        `greenbench.models.mamba.scan._scan_states` returns them."""
        _check(u, delta, A, B, C, chunk_size=chunk_size)
        seq_len, batch, D = u.shape
        N = A.shape[1]
        y = torch.empty_like(u)
        starts = u.new_empty(triton.cdiv(seq_len, chunk_size), batch, N, D)
        if y.numel() and N:
            with _on_device(u):
                _forward_kernel[(batch, triton.cdiv(D, BLOCK_D))](
                    u, delta, A, B, C, y, starts, seq_len, batch, D, N, chunk_size,
                    **_launch_config(N),
                )  # fmt: skip
        else:
            y.zero_()
            starts.zero_()
        return y, starts

    def backward(
        self,
        u: torch.Tensor,
        delta: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        starts: torch.Tensor,
        gy: torch.Tensor,
        chunk_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Gradients of ``y`` for upstream ``gy``: (du, ddelta, dA, dB, dC)."""
        gy = gy.contiguous()
        _check(u, delta, A, B, C, starts, gy, chunk_size=chunk_size)
        seq_len, batch, D = u.shape
        N = A.shape[1]
        if gy.shape != u.shape or starts.shape != (triton.cdiv(seq_len, chunk_size), batch, N, D):
            got = f"gy {tuple(gy.shape)}, starts {tuple(starts.shape)}"
            raise ValueError(f"selective scan backward: shapes do not match the inputs: {got}")
        if not (u.numel() and N):  # no terms: every gradient is zero
            return (
                torch.zeros_like(u),
                torch.zeros_like(u),
                torch.zeros_like(A),
                torch.zeros_like(B),
                torch.zeros_like(C),
            )
        blocks, config = triton.cdiv(D, BLOCK_D), _launch_config(N)
        scratch_steps = min(chunk_size, seq_len)
        gu, gdelta = torch.empty_like(u), torch.empty_like(u)
        gA_part = u.new_empty(batch, D, N)
        gB_part = u.new_empty(blocks, seq_len, batch, N)
        gC_part = u.new_empty(blocks, seq_len, batch, N)
        scratch = u.new_empty(batch * blocks * scratch_steps * BLOCK_D * config["BLOCK_N"])
        with _on_device(u):
            _backward_kernel[(batch, blocks)](
                u, delta, A, B, C, starts, gy, gu, gdelta, gA_part, gB_part, gC_part, scratch,
                seq_len, batch, D, N, chunk_size, scratch_steps, **config,
            )  # fmt: skip
        return gu, gdelta, gA_part.sum(0), gB_part.sum(0), gC_part.sum(0)


def triton_kernel(device: torch.device) -> TritonKernel:
    """The kernel for scans on ``device``: CUDA, or CPU when the kernels are interpreted
    (`INTERPRETED`); `KernelUnavailable` otherwise."""
    if device.type == "cuda" or (device.type == "cpu" and INTERPRETED):
        return TritonKernel()
    if device.type != "cpu":
        raise KernelUnavailable(f"the Triton selective scan runs on CUDA, not on {device.type}")
    if triton_interpreter_on():
        raise KernelUnavailable(
            "TRITON_INTERPRET=1 was set after greenbench loaded its Triton kernels, so they are "
            "compiled for a GPU; set TRITON_INTERPRET=1 before greenbench loads them"
        )
    raise KernelUnavailable(
        "the Triton selective scan is a CUDA kernel; on CPU use auto, native or torch (or set "
        "TRITON_INTERPRET=1 before greenbench loads it, to run it in Triton's interpreter)"
    )
