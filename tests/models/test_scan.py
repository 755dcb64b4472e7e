"""greenbench's selective scan against transformers' reference PyTorch scan: values and grads."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.models.mamba.modeling_mamba import mamba_selective_scan

from greenbench.models.scan import DEFAULT_CHUNK_SIZE, selective_scan


def make_inputs(batch, seq_len, d, n, *, dt_shift=-1.0, dt_scale=1.0, seed=0):
    """Time-major inputs: u, delta (T, B, D); A (D, N) < 0; B, C (T, B, N)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(seq_len, batch, d, generator=g)
    delta = F.softplus(dt_scale * torch.randn(seq_len, batch, d, generator=g) + dt_shift)
    A = -torch.exp(torch.randn(d, n, generator=g))
    B = torch.randn(seq_len, batch, n, generator=g)
    C = torch.randn(seq_len, batch, n, generator=g)
    return [x.requires_grad_() for x in (u, delta, A, B, C)]


def reference(u, delta, A, B, C):
    """transformers' pure-PyTorch scan (its per-step loop), in its (B, D, T) layout."""
    y = mamba_selective_scan(
        u.permute(1, 2, 0),
        delta.permute(1, 2, 0),
        A,
        B.permute(1, 2, 0),
        C.permute(1, 2, 0),
        use_associative_scan=False,
    )
    return y.permute(2, 0, 1)


def assert_matches_reference(inputs, chunk_size, rtol=1e-4):
    ours = selective_scan(*inputs, chunk_size=chunk_size)
    expected = reference(*inputs)
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(ours, expected, rtol=rtol, atol=rtol * expected.abs().max().item())
    upstream = torch.randn_like(expected)
    grads = torch.autograd.grad(ours, inputs, upstream)
    expected_grads = torch.autograd.grad(expected, inputs, upstream)
    for name, got, want in zip("u delta A B C".split(), grads, expected_grads, strict=True):
        assert torch.isfinite(got).all(), name
        scale = want.abs().max().item()
        torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * scale, msg=name)


@pytest.mark.parametrize("chunk_size", [1, 5, DEFAULT_CHUNK_SIZE, 64])
def test_matches_reference_for_any_chunking(chunk_size):
    # 37 steps: chunks of 5 leave a ragged last chunk; 64 is longer than the sequence.
    assert_matches_reference(make_inputs(2, 37, 6, 4), chunk_size)


def test_matches_reference_over_a_long_memory():
    # Mamba's init range for Δ (1e-3 .. 1e-1): states remember hundreds of steps.
    inputs = make_inputs(2, 300, 8, 16, dt_shift=-4.0, dt_scale=0.5, seed=1)
    assert_matches_reference(inputs, DEFAULT_CHUNK_SIZE)


def test_large_steps_neither_overflow_nor_lose_accuracy():
    # Δ·A down to about -100 per step: exp underflows to 0, nothing overflows.
    inputs = make_inputs(2, 40, 6, 4, dt_shift=3.0, dt_scale=3.0, seed=2)
    assert (inputs[1].detach()[..., None] * inputs[2].detach()).min() < -100
    assert_matches_reference(inputs, 16)


def test_low_precision_inputs_are_scanned_in_float32():
    inputs = [x.detach() for x in make_inputs(2, 20, 6, 4, seed=3)]
    half = [x.to(torch.bfloat16) for x in inputs]
    out = selective_scan(*half)
    assert out.dtype == torch.bfloat16
    expected = selective_scan(*[x.float() for x in half])
    torch.testing.assert_close(out, expected.to(torch.bfloat16))


def test_rejects_a_bad_chunk_size():
    with pytest.raises(ValueError, match="chunk_size"):
        selective_scan(*make_inputs(1, 4, 2, 2), chunk_size=0)
