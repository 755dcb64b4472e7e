"""greenbench's selective scan against transformers' reference PyTorch scan (values and grads),
and its native C kernel against the torch stepping implementation and a naive autograd loop;
how the backend is chosen (the model.scan setting, a missing or failing compiler)."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from transformers.models.mamba.modeling_mamba import mamba_selective_scan

from greenbench.errors import KernelUnavailable, SpecError
from greenbench.models.mamba import scan_native
from greenbench.models.mamba.kernels import resolve_scan
from greenbench.models.mamba.scan import (
    DEFAULT_CHUNK_SIZE,
    _scan_grads,
    _scan_states,
    selective_scan,
)


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


# --------------------------------------------------------------------------- native kernel


@pytest.fixture
def kernel() -> scan_native.NativeKernel:
    """The native kernel, built into the session's cache dir (so `selective_scan` under its
    default backend, auto, uses it too); skips without a C compiler."""
    if scan_native.find_compiler() is None:
        pytest.skip("no C compiler")
    found = scan_native.native_kernel()
    assert found is not None, "a C compiler is present but the kernel did not build"
    return found


def naive_scan(u, delta, A, B, C):
    """The recurrence written out step by step (autograd through every step)."""
    h = u.new_zeros(u.shape[1], u.shape[2], A.shape[1])  # (batch, D, N)
    ys = []
    for t in range(u.shape[0]):
        dA = torch.exp(delta[t, :, :, None] * A)
        h = dA * h + (delta[t] * u[t])[:, :, None] * B[t, :, None, :]
        ys.append((h * C[t, :, None, :]).sum(-1))
    return torch.stack(ys)


def torch_grads(inputs, upstream, chunk_size):
    """y and (du, ddelta, dA, dB, dC) of the torch stepping implementation."""
    u, delta, A, B, C = (x.detach() for x in inputs)
    y, starts = _scan_states(u, delta, A, B, C, chunk_size)
    S, gdA, gA, gB, gC = _scan_grads(u, delta, A, B, C, starts, upstream, chunk_size)
    return y, (delta * S, gdA + u * S, gA, gB, gC)


def assert_close_scaled(got, want, name, rtol=1e-4):
    assert torch.isfinite(got).all(), name
    scale = want.abs().max().item()
    torch.testing.assert_close(got, want.to(got.dtype), rtol=rtol, atol=rtol * scale, msg=name)


NATIVE_CASES = {
    # (batch, seq_len, D, N, chunk_size, input kwargs)
    "ragged-last-chunk": (2, 37, 6, 4, 5, {}),
    "batch-1": (1, 50, 40, 16, 16, {}),
    "chunk-1": (2, 9, 20, 3, 1, {}),
    "chunk-longer-than-seq": (3, 11, 17, 5, 64, {}),
    "channel-groups-and-padding": (2, 70, 300, 16, 32, {"dt_shift": -4.0, "dt_scale": 0.5}),
    "large-steps": (2, 40, 6, 4, 16, {"dt_shift": 3.0, "dt_scale": 3.0, "seed": 2}),
}


@pytest.mark.parametrize("case", NATIVE_CASES, ids=list(NATIVE_CASES))
def test_native_matches_torch_and_naive(kernel, case):
    batch, seq_len, d, n, chunk_size, kwargs = NATIVE_CASES[case]
    inputs = make_inputs(batch, seq_len, d, n, **{"seed": len(case), **kwargs})
    if case == "large-steps":  # exp(Δ·A) underflows; a cumsum closed form would overflow
        assert (inputs[1].detach()[..., None] * inputs[2].detach()).min() < -100
    upstream = torch.randn(seq_len, batch, d, generator=torch.Generator().manual_seed(7))

    y = selective_scan(*inputs, chunk_size=chunk_size)  # native: a kernel was found
    grads = torch.autograd.grad(y, inputs, upstream)
    y_torch, grads_torch = torch_grads(inputs, upstream, chunk_size)
    doubles = [x.detach().double().requires_grad_() for x in inputs]
    y_naive = naive_scan(*doubles)
    grads_naive = torch.autograd.grad(y_naive, doubles, upstream.double())

    assert_close_scaled(y, y_torch, "y vs torch")
    assert_close_scaled(y, y_naive, "y vs naive")
    names = "u delta A B C".split()
    for name, got, want, naive in zip(names, grads, grads_torch, grads_naive, strict=True):
        assert got.shape == want.shape, name
        assert_close_scaled(got, want, f"d{name} vs torch")
        assert_close_scaled(got, naive, f"d{name} vs naive")


def test_native_kernel_is_direct_and_thread_count_independent(kernel):
    u, delta, A, B, C = (x.detach() for x in make_inputs(3, 45, 300, 16, seed=5))
    gy = torch.randn_like(u)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [*kernel.forward(u, delta, A, B, C, 8)]
        one += kernel.backward(u, delta, A, B, C, one[1], gy, 8)
        torch.set_num_threads(2)
        two = [*kernel.forward(u, delta, A, B, C, 8)]
        two += kernel.backward(u, delta, A, B, C, two[1], gy, 8)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, two, strict=True):  # same partition and summation order
        assert torch.equal(a, b)
    _, starts_torch = _scan_states(u, delta, A, B, C, 8)
    assert_close_scaled(one[1], starts_torch, "saved chunk states")


def test_native_kernel_refuses_mismatched_shapes(kernel):
    u, delta, A, B, C = (x.detach() for x in make_inputs(2, 10, 8, 4))
    with pytest.raises(ValueError, match="B must be"):
        kernel.forward(u, delta, A, B[:, :1], C, 4)
    with pytest.raises(ValueError, match="float32"):
        kernel.forward(u.double(), delta, A, B, C, 4)


def test_native_propagates_nan_like_torch(kernel):
    u, delta, A, B, C = (x.detach() for x in make_inputs(2, 20, 6, 4, seed=8))
    delta[7, 1, 3] = float("nan")
    y = selective_scan(u, delta, A, B, C, chunk_size=4)
    y_torch, _ = _scan_states(u, delta, A, B, C, 4)
    assert torch.equal(y.isnan(), y_torch.isnan())
    assert y[7:, 1, 3].isnan().all() and not y[:7].isnan().any()
    with pytest.raises(ValueError, match="chunk_size"):
        kernel.forward(u, delta, A, B, C, 0)


def test_native_low_precision_and_empty_inputs(kernel):
    inputs = [x.detach() for x in make_inputs(2, 20, 6, 4, seed=3)]
    out = selective_scan(*[x.to(torch.bfloat16) for x in inputs])
    assert out.dtype == torch.bfloat16
    empty = selective_scan(*[x[:0] if x.dim() == 3 else x for x in inputs])
    assert empty.shape == (0, 2, 6)


def test_setting_torch_forces_the_torch_scan(kernel, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("native kernel called")

    inputs = make_inputs(2, 12, 6, 4, seed=4)
    monkeypatch.setattr(scan_native.NativeKernel, "forward", fail)
    assert resolve_scan("torch", "cpu") == "torch"
    y = selective_scan(*inputs, chunk_size=5, backend="torch")
    y.sum().backward()
    y_torch, _ = torch_grads(inputs, torch.ones_like(y), 5)
    assert torch.equal(y.detach(), y_torch)


def test_setting_native_and_auto_use_the_kernel(kernel):
    assert resolve_scan("auto", "cpu") == "native"
    assert resolve_scan("native", "cpu") == "native"
    with pytest.raises(SpecError, match=r"model\.scan='fast'"):
        resolve_scan("fast", "cpu")
    with pytest.raises(KernelUnavailable, match="CPU kernel"):
        resolve_scan("native", "cuda")
    with pytest.raises(KernelUnavailable, match="needs CUDA"):
        resolve_scan("mamba-ssm", "cpu")
    with pytest.raises(ValueError, match="backend"):
        selective_scan(*make_inputs(1, 4, 2, 2), backend="fast")


def test_kernel_build_is_cached_under_a_keyed_name(kernel, monkeypatch, tmp_path):
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path))
    built = scan_native.native_kernel()
    assert built is not None and built.path.parent == tmp_path / "native"
    assert [p.name for p in (tmp_path / "native").iterdir()] == [built.path.name]  # no temp
    assert built.path.name.startswith("scan_kernel-") and built.path.suffix == ".so"
    assert (
        "-march=native" in built.flags
        or "-mcpu=native" in built.flags
        or not any(f.startswith(("-march", "-mcpu")) for f in built.flags)
    )
    # a second build (another process) finds the file and does not compile
    monkeypatch.setattr(scan_native.subprocess, "run", _no_compile(scan_native.subprocess.run))
    assert scan_native._build(scan_native.find_compiler(), built.flags, tmp_path / "native") == (
        built.path
    )


def _no_compile(run):
    def guarded(cmd, *args, **kwargs):
        assert "--version" in cmd, f"compiled again: {cmd}"
        return run(cmd, *args, **kwargs)

    return guarded


def test_missing_compiler_falls_back_with_one_warning(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(scan_native, "find_compiler", lambda: str(tmp_path / "no-such-cc"))
    inputs = make_inputs(2, 12, 6, 4, seed=6)
    with caplog.at_level(logging.WARNING, logger=scan_native.__name__):
        assert resolve_scan("auto", "cpu") == "torch"
        y = selective_scan(*inputs, chunk_size=5)
        selective_scan(*inputs, chunk_size=5)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "using the torch scan" in warnings[0].getMessage()
    assert "no-such-cc" in warnings[0].getMessage()
    y_torch, _ = torch_grads(inputs, torch.ones_like(y), 5)
    assert torch.equal(y.detach(), y_torch)
    assert not (tmp_path / "native").exists() or not any((tmp_path / "native").iterdir())

    # forced: failing to build is an error, named at resolution and at the scan itself
    with pytest.raises(KernelUnavailable, match="unavailable"):
        resolve_scan("native", "cpu")
    with pytest.raises(KernelUnavailable, match="unavailable"):
        selective_scan(*inputs, backend="native")


def test_failing_compilation_falls_back(kernel, monkeypatch, tmp_path, caplog):
    broken = tmp_path / "scan_kernel.c"
    broken.write_text("this is not C\n")
    monkeypatch.setattr(scan_native, "SOURCE", broken)
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING, logger=scan_native.__name__):
        assert resolve_scan("auto", "cpu") == "torch"
    assert "failed" in caplog.text
    assert not any((tmp_path / "cache" / "native").iterdir())  # no temporary file left
