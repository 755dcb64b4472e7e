"""Ring attention's log-sum-exp merge equals whole-sequence causal SDPA, chunk by chunk, on any
device: the ``cuda`` cases run it on a GPU with CUDA tensors, which the gloo ring in
tests/strategies/test_cp.py cannot (gloo sends CPU tensors only, and NCCL takes one rank per GPU).

The ``cp`` ranks of the ring are threads of one process: `exchange` is replaced by an in-memory
one (a FIFO per ordered pair of ranks, so messages match in the order given, as
``batch_isend_irecv`` matches them) and each thread runs the ring's forward and its hand-written
backward for its zigzag chunk. The backward is called directly, not through autograd: on CUDA
autograd runs every backward of a device on one engine thread, where the ranks' backwards would
wait on each other's messages forever. All threads share the device's default stream, so a
message cloned by its sender is ready before the receiver's copy of it.

Tolerances: float32, rtol 1e-4 and atol 1e-5 on outputs and gradients (a reordered float32
softmax; TF32 stays off, torch's default for matmuls); bfloat16 inputs, atol and rtol 2e-2 on
outputs (the ring computes in float32 and rounds once to bfloat16, SDPA's kernels round their
probabilities to bfloat16 before multiplying by V: a few bfloat16 steps, 2⁻⁸ each, apart).
"""

from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from greenbench.distributed.context_parallel import chunk_index
from greenbench.distributed.cp_group import CPGroup
from greenbench.models.transformer import context_parallel
from greenbench.models.transformer.context_parallel import LAYOUT, _RingAttention

BATCH, HEADS, KV_HEADS, HEAD_DIM = 2, 4, 2, 16
TOLERANCE = {
    torch.float32: {"rtol": 1e-4, "atol": 1e-5},
    torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
}


class _Ring:
    """In-memory messages between the ranks (threads) of one ring."""

    def __init__(self, size: int) -> None:
        self.boxes = {(a, b): queue.Queue() for a in range(size) for b in range(size)}

    def exchange(self, cpg: CPGroup, sends=(), recvs=()) -> SimpleNamespace:
        for tensor, peer in sends:
            self.boxes[cpg.rank, peer].put(tensor.clone())

        def wait() -> None:
            for buffer, peer in recvs:
                buffer.copy_(self.boxes[peer, cpg.rank].get(timeout=120))

        return SimpleNamespace(wait=wait)


class _Ctx:
    """What the ring's forward and backward use of autograd's context."""

    def save_for_backward(self, *tensors: torch.Tensor) -> None:
        self.saved_tensors = tensors


def _rank(rank: int, cp: int, q, k, v, grad_out) -> tuple[torch.Tensor, ...]:
    """One rank's chunk through the ring: its output (B, Tc, H, D) and dq, dk, dv of its chunk."""
    tokens = q.shape[2]
    at = chunk_index(rank, cp, tokens, LAYOUT, q.device)
    cpg = CPGroup(None, None, "cp", rank, cp)  # type: ignore[arg-type]
    position_ids = at[None]  # one document per row
    out = context_parallel.ring_attention(
        q[:, :, at], k[:, :, at], v[:, :, at], position_ids, cpg, layout=LAYOUT
    )
    # the same through the autograd Function's own forward and backward (float32, as it runs)
    f32 = torch.float32
    tc = at.numel()
    q_g = q[:, :, at].to(f32).reshape(BATCH, KV_HEADS, HEADS // KV_HEADS, tc, HEAD_DIM)
    doc = torch.zeros(BATCH, tc, dtype=at.dtype, device=q.device)
    ctx = _Ctx()
    scale = HEAD_DIM**-0.5
    k_c, v_c = k[:, :, at].to(f32).contiguous(), v[:, :, at].to(f32).contiguous()
    _RingAttention.forward(ctx, q_g.contiguous(), k_c, v_c, doc, cpg, scale, LAYOUT)
    go = grad_out[:, at].to(f32).transpose(1, 2).reshape_as(q_g).contiguous()
    dq, dk, dv, *_ = _RingAttention.backward(ctx, go)
    return out, dq.reshape(BATCH, HEADS, tc, HEAD_DIM), dk, dv


def _compare(device: str, dtype: torch.dtype, cp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    tokens = 2 * cp * 8
    q = torch.randn(BATCH, HEADS, tokens, HEAD_DIM, device=device, dtype=dtype)
    k = torch.randn(BATCH, KV_HEADS, tokens, HEAD_DIM, device=device, dtype=dtype)
    v = torch.randn(BATCH, KV_HEADS, tokens, HEAD_DIM, device=device, dtype=dtype)
    grad_out = torch.randn(BATCH, tokens, HEADS, HEAD_DIM, device=device)
    leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
    whole = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(
        1, 2
    )  # the reference in the inputs' dtype
    whole32 = F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True)
    whole32.transpose(1, 2).backward(grad_out)
    ring = _Ring(cp)
    monkeypatch.setattr(context_parallel, "exchange", ring.exchange)
    with ThreadPoolExecutor(max_workers=cp) as pool:
        futures = [pool.submit(_rank, r, cp, q, k, v, grad_out) for r in range(cp)]
        results = [f.result(timeout=300) for f in futures]
    if device == "cuda":
        torch.cuda.synchronize()
    for rank, (out, dq, dk, dv) in enumerate(results):
        at = chunk_index(rank, cp, tokens, LAYOUT, q.device)
        assert out.dtype == dtype
        torch.testing.assert_close(out, whole[:, at], **TOLERANCE[dtype], msg=f"rank {rank}")
        if dtype == torch.float32:  # gradients: the float32 ring against float32 SDPA
            grads = (dq, dk, dv)
            for name, got, leaf in zip("qkv", grads, leaves, strict=True):
                want = leaf.grad[:, :, at]
                torch.testing.assert_close(got, want, **TOLERANCE[dtype], msg=f"d{name} {rank}")


@pytest.mark.parametrize("cp", [2, 4])
def test_the_threaded_ring_equals_causal_sdpa_on_cpu(cp: int, monkeypatch: pytest.MonkeyPatch):
    """The harness itself, where it can run: the CPU ring equals SDPA chunk by chunk."""
    _compare("cpu", torch.float32, cp, monkeypatch)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cp", [2, 4])
def test_the_ring_on_cuda_equals_causal_sdpa_chunk_by_chunk(
    cp: int, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
):
    _compare("cuda", dtype, cp, monkeypatch)
