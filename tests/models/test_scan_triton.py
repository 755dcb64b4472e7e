"""greenbench's Triton selective scan (`greenbench.models.mamba.scan_triton`) against the torch
scan: outputs, saved chunk states and gradients, and a Mamba training step; how ``model.scan``
chooses it.

On CPU the kernels run in Triton's interpreter. `triton.jit` decides whether to interpret when
the kernel module is imported (from ``TRITON_INTERPRET``), so the interpreted runs happen in one
subprocess started with ``TRITON_INTERPRET=1`` (this file, run as a script): the setting never
leaks into this pytest process, and a kernel module imported here without it (to check that CPU
refuses the kernel) cannot spoil them. The subprocess writes its results to a file; the
comparisons are made here. The ``cuda`` tests run the compiled kernels on a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from transformers import MambaConfig, MambaForCausalLM

from greenbench.errors import KernelUnavailable, SpecError
from greenbench.models import build_model
from greenbench.models.mamba import kernels, use_fast_scan
from greenbench.models.mamba.kernels import resolve_scan
from greenbench.models.mamba.scan import _scan_grads, _scan_states, selective_scan

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# (seq_len, batch, D, N, chunk_size, input kwargs). The kernels' channel block is 32 wide.
CASES = {
    "ragged-last-chunk": (37, 2, 8, 4, 8, {}),
    "two-channel-blocks": (40, 2, 40, 16, 16, {}),  # the second block is partly padding
    "state-size-5-chunk-past-the-end": (13, 2, 24, 5, 32, {}),
    "chunk-1": (9, 1, 20, 3, 1, {}),
    "long-memory": (40, 2, 12, 16, 7, {"dt_shift": -4.0, "dt_scale": 0.5}),
    # Δ·A down to about -100 per step: exp underflows to 0, nothing overflows
    "large-steps": (40, 2, 6, 4, 16, {"dt_shift": 3.0, "dt_scale": 3.0, "seed": 2}),
}

# A Mamba small enough for the interpreter: 64 scan channels (two blocks), state 8, 2 layers.
SMALL_MAMBA = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "state_size": 8}


def make_inputs(seq_len, batch, d, n, *, dt_shift=-1.0, dt_scale=1.0, seed=0):
    """Time-major inputs u, delta (T, B, D), A (D, N) < 0, B, C (T, B, N), and an upstream
    gradient for y."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(seq_len, batch, d, generator=g)
    delta = F.softplus(dt_scale * torch.randn(seq_len, batch, d, generator=g) + dt_shift)
    A = -torch.exp(torch.randn(d, n, generator=g))
    B = torch.randn(seq_len, batch, n, generator=g)
    C = torch.randn(seq_len, batch, n, generator=g)
    return [u, delta, A, B, C], torch.randn(seq_len, batch, d, generator=g)


def scan_and_grads(inputs, upstream, chunk_size, backend):
    """y and (du, ddelta, dA, dB, dC) through `selective_scan` and autograd."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    y = selective_scan(*leaves, chunk_size=chunk_size, backend=backend)
    return y.detach(), torch.autograd.grad(y, leaves, upstream)


def reference_in_double(inputs, upstream, chunk_size):
    """y, the saved chunk states and the gradients of the torch stepping scan, in float64."""
    u, delta, A, B, C = (x.detach().double() for x in inputs)
    y, starts = _scan_states(u, delta, A, B, C, chunk_size)
    S, gdA, gA, gB, gC = _scan_grads(u, delta, A, B, C, starts, upstream.double(), chunk_size)
    return y, starts, (delta * S, gdA + u * S, gA, gB, gC)


def assert_close_scaled(got, want, name, rtol=1e-4):
    assert got.shape == want.shape, name
    assert torch.isfinite(got).all(), name
    scale = want.abs().max().item()
    torch.testing.assert_close(got, want.to(got.dtype), rtol=rtol, atol=rtol * scale, msg=name)


def small_mamba(backend, device="cpu"):
    torch.manual_seed(0)
    with torch.device(device):
        model = MambaForCausalLM(
            MambaConfig(**SMALL_MAMBA, expand=2, tie_word_embeddings=False, use_cache=False)
        )
    return use_fast_scan(model, backend)


def train_step(model, ids):
    """One SGD step on ``ids``: the loss, every parameter's gradient, the loss after the step."""
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=0.05).step()
    with torch.no_grad():
        after = model(input_ids=ids, labels=ids).loss
    return loss.detach(), grads, after


def step_ids(vocab_size, device="cpu"):
    g = torch.Generator().manual_seed(3)
    return torch.randint(0, vocab_size, (2, 24), generator=g).to(device)


def assert_same_step(got, want, rtol=1e-4):
    (loss, grads, after), (loss_ref, grads_ref, after_ref) = got, want
    torch.testing.assert_close(loss, loss_ref, rtol=rtol, atol=rtol)
    assert grads.keys() == grads_ref.keys()
    for name, grad in grads.items():
        assert_close_scaled(grad, grads_ref[name], name, rtol)
    torch.testing.assert_close(after, after_ref, rtol=rtol, atol=rtol)
    assert after < loss  # it trained


# ------------------------------------------------------------------ interpreted, in a subprocess


def _interpreted_main(cases_file: str, results_file: str) -> None:
    """The subprocess: run every case through the Triton backend (interpreted) and save."""
    from greenbench.models.mamba import scan_triton

    calls = {"forward": 0, "backward": 0}
    for name in calls:
        original = getattr(scan_triton.TritonKernel, name)

        def counted(self, *args, _original=original, _name=name):
            calls[_name] += 1
            return _original(self, *args)

        setattr(scan_triton.TritonKernel, name, counted)

    results = {}
    for case, (inputs, upstream, chunk_size) in torch.load(cases_file).items():
        y, grads = scan_and_grads(inputs, upstream, chunk_size, "triton")
        _, starts = scan_triton.TritonKernel().forward(
            *(x.contiguous() for x in inputs), chunk_size
        )
        results[case] = (y, starts, grads)
    results["model-step"] = train_step(small_mamba("triton"), step_ids(SMALL_MAMBA["vocab_size"]))
    results["interpreted"] = scan_triton.INTERPRETED
    results["resolved"] = resolve_scan("triton", "cpu")
    results["calls"] = calls
    torch.save(results, results_file)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """The subprocess's results: per case (y, saved chunk states, gradients), and more."""
    pytest.importorskip("triton")
    folder = tmp_path_factory.mktemp("triton-interpreter")
    cases = {}
    for seed, (case, (seq_len, batch, d, n, chunk_size, kwargs)) in enumerate(CASES.items()):
        inputs, upstream = make_inputs(seq_len, batch, d, n, **{"seed": seed, **kwargs})
        cases[case] = (inputs, upstream, chunk_size)
    torch.save(cases, folder / "cases.pt")
    done = subprocess.run(
        [sys.executable, __file__, str(folder / "cases.pt"), str(folder / "results.pt")],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return cases, torch.load(folder / "results.pt")


def test_interpreter_runs_the_kernels(interpreted):
    _, results = interpreted
    assert results["interpreted"] is True
    assert results["resolved"] == "triton"  # model.scan=triton is allowed on CPU under it
    # each case: one scan (forward + backward) and one direct forward; the model: two layers,
    # forward, backward and the forward after the step
    assert results["calls"] == {"forward": 2 * len(CASES) + 4, "backward": len(CASES) + 2}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_interpreted_scan_matches_torch(interpreted, case):
    cases, results = interpreted
    inputs, upstream, chunk_size = cases[case]
    y, starts, grads = results[case]
    y_torch, grads_torch = scan_and_grads(inputs, upstream, chunk_size, "torch")
    y_double, starts_double, grads_double = reference_in_double(inputs, upstream, chunk_size)
    if case == "large-steps":
        assert (inputs[1][..., None] * inputs[2]).min() < -100
    assert_close_scaled(y, y_torch, "y")
    assert_close_scaled(y, y_double, "y vs float64")
    assert_close_scaled(starts, starts_double, "saved chunk states")
    names = "u delta A B C".split()
    for name, got, want, exact in zip(names, grads, grads_torch, grads_double, strict=True):
        assert_close_scaled(got, want, f"d{name}")
        assert_close_scaled(got, exact, f"d{name} vs float64")


def test_interpreted_mamba_trains_like_the_torch_scan(interpreted):
    _, results = interpreted
    ids = step_ids(SMALL_MAMBA["vocab_size"])
    assert_same_step(results["model-step"], train_step(small_mamba("torch"), ids))


# ------------------------------------------------------------------ choosing the backend


def test_cpu_refuses_triton_without_the_interpreter(monkeypatch):
    pytest.importorskip("triton")
    from greenbench.models.mamba import scan_triton

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(scan_triton, "INTERPRETED", False)  # as imported without it
    with pytest.raises(KernelUnavailable, match="a CUDA kernel; on CPU use auto, native or torch"):
        resolve_scan("triton", "cpu")
    inputs, _ = make_inputs(5, 1, 4, 2)
    with pytest.raises(KernelUnavailable, match="CUDA kernel"):
        selective_scan(*inputs, backend="triton")
    # set too late: the kernel module was imported without it
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_scan("triton", "cpu") == "triton"
    with pytest.raises(KernelUnavailable, match="TRITON_INTERPRET=1 before"):
        selective_scan(*inputs, backend="triton")


def test_mamba_refuses_the_mamba2_kernel():
    for device in ("cpu", "cuda"):
        with pytest.raises(SpecError, match=r"model\.scan=fla is .*Mamba-2.*triton"):
            resolve_scan("fla", device)


def _fake_mamba_ssm(monkeypatch, importable: bool) -> None:
    """mamba-ssm as transformers finds it (CUDA and the package present), importable or not
    (a source install without its CUDA extension fails to import)."""
    import transformers.utils.import_utils as import_utils

    monkeypatch.setattr(import_utils, "is_mamba_ssm_available", lambda: True)
    monkeypatch.setitem(
        sys.modules, "mamba_ssm", types.ModuleType("mamba_ssm") if importable else None
    )


def test_auto_on_cuda_prefers_mamba_ssm_then_triton_then_torch(monkeypatch):
    pytest.importorskip("triton")
    _fake_mamba_ssm(monkeypatch, importable=True)
    assert resolve_scan("auto", "cuda") == "mamba-ssm"
    _fake_mamba_ssm(monkeypatch, importable=False)
    assert resolve_scan("auto", "cuda") == "triton"
    assert resolve_scan("triton", "cuda") == "triton"
    with pytest.raises(KernelUnavailable, match="mamba-ssm cannot be imported"):
        resolve_scan("mamba-ssm", "cuda")
    monkeypatch.setitem(sys.modules, "triton", None)  # triton not installed
    assert not kernels.triton_available()
    assert resolve_scan("auto", "cuda") == "torch"
    with pytest.raises(KernelUnavailable, match="triton cannot be imported"):
        resolve_scan("triton", "cuda")
    with pytest.raises(KernelUnavailable, match="native is a CPU kernel"):
        resolve_scan("native", "cuda")


def test_triton_missing_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.delitem(sys.modules, "greenbench.models.mamba.scan_triton", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(KernelUnavailable, match="triton cannot be imported"):
        resolve_scan("triton", "cpu")
    inputs, _ = make_inputs(5, 1, 4, 2)
    with pytest.raises(KernelUnavailable, match="needs triton"):
        selective_scan(*inputs, backend="triton")


def test_the_mixer_passes_triton_to_the_scan(monkeypatch):
    seen = []

    def fake_scan(x, delta, A, B, C, *, chunk_size, backend):
        seen.append(backend)
        return torch.zeros_like(x)

    monkeypatch.setattr("greenbench.models.mamba.model.selective_scan", fake_scan)
    model = small_mamba("triton")
    model(input_ids=step_ids(SMALL_MAMBA["vocab_size"]))
    assert seen == ["triton"] * SMALL_MAMBA["num_hidden_layers"]


# ------------------------------------------------------------------ compiled, on a GPU


@pytest.mark.cuda
@needs_cuda
def test_cuda_scan_matches_the_reference_at_a_realistic_shape():
    # Mamba 125m's scan: D 1536, N 16; a 1024-token sequence; Mamba's Δ init range
    inputs, upstream = make_inputs(1024, 2, 1536, 16, dt_shift=-4.0, dt_scale=0.5, seed=11)
    inputs, upstream = [x.cuda() for x in inputs], upstream.cuda()
    chunk_size = 32
    y, grads = scan_and_grads(inputs, upstream, chunk_size, "triton")
    y_double, starts_double, grads_double = reference_in_double(inputs, upstream, chunk_size)
    assert_close_scaled(y, y_double, "y vs float64")
    y_torch, grads_torch = scan_and_grads(inputs, upstream, chunk_size, "torch")
    assert_close_scaled(y, y_torch, "y vs torch")
    from greenbench.models.mamba.scan_triton import TritonKernel

    _, starts = TritonKernel().forward(*inputs, chunk_size)
    assert_close_scaled(starts, starts_double, "saved chunk states")
    names = "u delta A B C".split()
    for name, got, want, exact in zip(names, grads, grads_torch, grads_double, strict=True):
        assert_close_scaled(got, exact, f"d{name} vs float64")
        assert_close_scaled(got, want, f"d{name} vs torch")


@pytest.mark.cuda
@needs_cuda
def test_cuda_tiny_mamba_trains_one_step_like_the_torch_scan():
    assert resolve_scan("triton", "cuda") == "triton"
    steps = {}
    for backend in ("triton", "torch"):
        model = build_model("mamba", "tiny", seed=0, device="cuda", kernel=backend)
        steps[backend] = train_step(model, step_ids(model.config.vocab_size, "cuda"))
    assert_same_step(steps["triton"], steps["torch"])


if __name__ == "__main__":
    _interpreted_main(*sys.argv[1:])
