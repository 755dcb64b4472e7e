"""Mamba-2: the chunked SSD scan against the plain recurrence, the model against transformers'
own Mamba-2, its presets, FLOPs, kernel choice (fla and mamba-ssm faked at their import), and the
GPU kernels against the torch scan where a CUDA device has them."""

from __future__ import annotations

import copy
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer, mamba2_chunk_scan

from greenbench.errors import KernelUnavailable, SpecError
from greenbench.models import FAMILIES, build_model, model_info
from greenbench.models.flops import flops_per_token
from greenbench.models.mamba2 import (
    PRESETS,
    SSDMamba2Mixer,
    causal_depthwise_conv1d,
    mamba2_scan_flops_per_token,
    scan_function,
    ssd_scan,
)
from greenbench.models.mamba2 import kernels as mamba2_kernels
from greenbench.models.mamba2.kernels import MODULES, fla_scan, resolve_scan


def recurrence(x, dt, A, B, C, *, final=False):
    """The Mamba-2 recurrence stepped token by token: S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_tᵀ,
    y_t = S_t C_t, per batch and head (P × N states); B and C repeated from groups to heads.
    ``final``: the last state S_T (batch, H, P, N) instead of y."""
    batch, seq_len, heads, head_dim = x.shape
    groups, state = B.shape[2:]
    Bh, Ch = (t.repeat_interleave(heads // groups, dim=2) for t in (B, C))
    S = x.new_zeros(batch, heads, head_dim, state)
    ys = []
    for t in range(seq_len):
        decay = torch.exp(dt[:, t] * A)[..., None, None]
        S = decay * S + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append((S @ Ch[:, t, :, :, None]).squeeze(-1))
    return S if final else torch.stack(ys, 1)


def scan_inputs(batch, seq_len, heads, head_dim, groups, state, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype)

    x = randn(batch, seq_len, heads, head_dim)
    dt = F.softplus(randn(batch, seq_len, heads) - 1.0)
    A = -torch.linspace(0.5, 4.0, heads, dtype=dtype)  # strong decays: exp(cs) spans decades
    B, C = randn(batch, seq_len, groups, state), randn(batch, seq_len, groups, state)
    return [t.requires_grad_() for t in (x, dt, A, B, C)]


def grads(out, inputs, seed=1):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.device, out.dtype)
    return torch.autograd.grad((out * weight).sum(), inputs)


@pytest.mark.parametrize(
    ("seq_len", "chunk", "heads", "groups"),
    [(37, 8, 4, 2), (37, 8, 4, 1), (5, 8, 2, 1), (16, 16, 3, 3), (13, 1, 2, 1), (64, 7, 4, 2)],
)
def test_chunked_scan_equals_the_recurrence_float64(seq_len, chunk, heads, groups):
    inputs = scan_inputs(2, seq_len, heads, 3, groups, 5)
    ours, ref = ssd_scan(*inputs, chunk_size=chunk), recurrence(*inputs)
    assert ours.dtype == torch.float64 and ours.shape == ref.shape
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    for name, a, b in zip(
        "x dt A B C".split(), grads(ours, inputs), grads(ref, inputs), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)


def test_chunked_scan_float32_is_tight_against_float64():
    inputs = scan_inputs(2, 200, 4, 16, 1, 8)
    ref = recurrence(*inputs)
    ref_grads = grads(ref, inputs)
    low = [t.detach().float().requires_grad_() for t in inputs]
    ours = ssd_scan(*low, chunk_size=64)
    assert ours.dtype == torch.float32
    # float32 rounding only: ~1e-6 of the largest value, chunk 64 with decays down to e^-80
    torch.testing.assert_close(ours.double(), ref, rtol=1e-3, atol=1e-5 * ref.abs().max().item())
    for name, a, b in zip("x dt A B C".split(), grads(ours, low), ref_grads, strict=True):
        torch.testing.assert_close(
            a.double(), b, rtol=1e-3, atol=2e-5 * b.abs().max().item(), msg=name
        )


@pytest.mark.parametrize(
    ("seq_len", "split", "chunk", "heads", "groups"),
    [(37, 16, 8, 4, 2), (37, 13, 8, 4, 1), (9, 4, 8, 2, 1), (24, 8, 8, 6, 3)],
)
def test_scan_continues_from_an_initial_state_float64(seq_len, split, chunk, heads, groups):
    """Two pieces of a sequence, the second started from the first's final state, are the
    whole sequence's scan: outputs, final state (against the recurrence's) and gradients."""
    inputs = scan_inputs(2, seq_len, heads, 3, groups, 5)
    whole, state = ssd_scan(*inputs, chunk_size=chunk, return_final_state=True)
    x, dt, A, B, C = inputs
    head = [x[:, :split], dt[:, :split], A, B[:, :split], C[:, :split]]
    tail = [x[:, split:], dt[:, split:], A, B[:, split:], C[:, split:]]
    y1, s1 = ssd_scan(*head, chunk_size=chunk, return_final_state=True)
    y2, s2 = ssd_scan(*tail, chunk_size=chunk, initial_state=s1, return_final_state=True)
    pieces = torch.cat([y1, y2], 1)
    torch.testing.assert_close(pieces, whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(whole, recurrence(*inputs), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s2, state, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(state, recurrence(*inputs, final=True), rtol=1e-10, atol=1e-10)
    out_whole = torch.cat([whole.flatten(), state.flatten()])
    out_pieces = torch.cat([pieces.flatten(), s2.flatten()])
    for name, a, b in zip(
        "x dt A B C".split(), grads(out_pieces, inputs), grads(out_whole, inputs), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)


def test_chunked_scan_matches_transformers_torch_ssd():
    inputs = [t.detach().float() for t in scan_inputs(2, 100, 4, 8, 2, 8)]
    theirs = mamba2_chunk_scan(*inputs, chunk_size=32)
    torch.testing.assert_close(ssd_scan(*inputs, chunk_size=32), theirs, rtol=1e-4, atol=1e-4)


def reference_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights with transformers' own mixer class (its pure-torch path on CPU)."""
    ref = copy.deepcopy(model)
    for module in ref.modules():
        if type(module) is SSDMamba2Mixer:
            module.__class__ = Mamba2Mixer
    return ref


def test_built_model_uses_our_mixer_without_patching_transformers():
    model = build_model("mamba2", "tiny", seed=0)
    mixers = [m for m in model.modules() if isinstance(m, Mamba2Mixer)]
    assert len(mixers) == model.config.num_hidden_layers
    assert all(type(m) is SSDMamba2Mixer and m.scan_backend == "auto" for m in mixers)
    assert Mamba2Mixer.forward is not SSDMamba2Mixer.forward  # the library class is untouched
    assert model.lm_head.weight is not model.backbone.embeddings.weight  # untied head


@pytest.mark.parametrize("masked", [False, True])
def test_training_forward_and_gradients_match_transformers(masked):
    model = build_model("mamba2", "tiny", seed=0, kernel="torch")
    ref = reference_copy(model)
    ids = torch.randint(
        0, model.config.vocab_size, (2, 90), generator=torch.Generator().manual_seed(0)
    )
    labels = ids.clone()
    labels[1, 70:] = -100  # padding
    kwargs = {"input_ids": ids, "labels": labels}
    if masked:
        mask = torch.ones_like(ids)
        mask[1, 70:] = 0
        kwargs["attention_mask"] = mask
    ours, theirs = model(**kwargs), ref(**kwargs)
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-4, atol=1e-4)
    ours.loss.backward()
    theirs.loss.backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        scale = q.grad.abs().max().item()
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4 * scale, msg=name)


def test_generation_cache_path_defers_to_transformers():
    model = build_model("mamba2", "tiny", seed=0).eval()
    ref = reference_copy(model)
    ids = torch.randint(0, model.config.vocab_size, (1, 8))
    with torch.no_grad():
        ours = model(input_ids=ids, use_cache=True)
        theirs = ref(input_ids=ids, use_cache=True)
    assert ours.cache_params is not None
    torch.testing.assert_close(ours.logits, theirs.logits)


def test_position_ids_are_ignored_and_stages_compose():
    model = build_model("mamba2", "tiny", seed=0)
    ids = torch.randint(0, model.config.vocab_size, (2, 24))
    family = FAMILIES["mamba2"]
    whole = model(input_ids=ids).logits
    pos = torch.arange(24).repeat(2, 1)
    hidden, pos_out = family.pipeline_stage(model, 0, 3)(ids, pos)
    assert pos_out is pos
    torch.testing.assert_close(family.pipeline_stage(model, 3, 8)(hidden, pos), whole)
    assert family.blocks(model) == list(model.backbone.layers)


def test_causal_conv_matches_conv1d():
    x = torch.randn(3, 11, 5)  # (B, T, C)
    conv = torch.nn.Conv1d(5, 5, kernel_size=4, groups=5, padding=3)
    expected = conv(x.transpose(1, 2))[..., :11].transpose(1, 2)
    torch.testing.assert_close(causal_depthwise_conv1d(x, conv.weight, conv.bias), expected)


def test_training_step_decreases_loss():
    model = build_model("mamba2", "tiny", seed=0)
    ids = torch.randint(
        0, model.config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(4):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1, losses


# -- presets, parameter counts, FLOPs ------------------------------------------------------


@pytest.mark.parametrize("size", list(PRESETS))
def test_info_equals_the_built_model_and_matches_the_transformer(size):
    model = build_model("mamba2", size, seed=0, device="meta")
    info = model_info("mamba2", size)
    assert info.n_params == sum(p.numel() for p in model.parameters())
    assert info.n_params_embedding == model.backbone.embeddings.weight.numel()
    assert info.n_heads == model.config.num_heads and info.d_inner == 2 * info.d_model
    assert info.chunk_size == model.config.chunk_size == PRESETS[size].chunk_size
    transformer = model_info("transformer", size)
    assert (info.vocab_size, info.d_model) == (transformer.vocab_size, transformer.d_model)
    assert abs(info.n_params / transformer.n_params - 1) < 0.05


def test_flops_formula_by_hand():
    info = model_info("mamba2", "tiny")  # d_inner 512, N 64, Q 64, G 1, 8 layers
    per_layer = 2 * 64 * (64 + 512) + 4 * 64 * 512
    assert mamba2_scan_flops_per_token(info) == 3 * 8 * per_layer
    expected = 6 * info.n_params_non_embedding + 3 * 8 * per_layer
    assert flops_per_token(info, 256) == flops_per_token(info, 8192) == expected


def test_flop_counter_sees_the_projections_and_the_scan_matmuls():
    """FlopCounterMode's matmul count (a cross-check) agrees with the formula to <1%: what it
    misses is the conv, A_log, D, dt_bias and norm weights the 6·N term counts as matmuls."""
    from greenbench.models.flops import measured_flops_per_token

    model = build_model("mamba2", "tiny", seed=0)
    ids = torch.randint(0, 1024, (2, 256), generator=torch.Generator().manual_seed(0))
    measured = measured_flops_per_token(model, {"input_ids": ids, "labels": ids})
    assert measured == pytest.approx(flops_per_token(model_info("mamba2", "tiny"), 256), rel=0.01)


# -- kernel choice -------------------------------------------------------------------------


def test_cpu_resolves_auto_and_torch_to_torch_and_refuses_the_rest_in_one_line():
    family = FAMILIES["mamba2"]
    assert family.resolve_kernel("auto", "cpu") == "torch"
    assert family.resolve_kernel("torch", "cpu") == "torch"
    assert family.kernels_used("torch") == {"scan": "torch"}
    for setting, error in [
        ("fla", KernelUnavailable),
        ("mamba-ssm", KernelUnavailable),
        ("native", SpecError),
        ("triton", SpecError),
        ("cuda-magic", SpecError),
    ]:
        with pytest.raises(error) as caught:
            family.resolve_kernel(setting, "cpu")
        message = str(caught.value)
        assert "\n" not in message and f"model.scan={setting}" in message.replace("'", "")


def test_cpu_resolution_never_imports_the_gpu_libraries(monkeypatch):
    def boom(name):
        raise AssertionError(f"imported {name} on CPU")

    monkeypatch.setattr(mamba2_kernels.importlib, "import_module", boom)
    assert resolve_scan("auto", "cpu") == "torch"
    with pytest.raises(KernelUnavailable):
        resolve_scan("fla", "cpu")


@pytest.fixture
def gpu_libraries(monkeypatch):
    """Fake what imports on a CUDA machine: ``install(*backends)`` puts a module for each named
    backend in ``sys.modules`` and marks the others missing (an import then fails)."""

    def install(*backends, fla_flags=None):
        for backend, module in MODULES.items():
            fake = types.ModuleType(module) if backend in backends else None
            monkeypatch.setitem(sys.modules, module, fake)
        flags = types.ModuleType("fla.utils")  # fla-core's own declarations of broken setups
        flags.__dict__.update(fla_flags or {})
        monkeypatch.setitem(sys.modules, "fla.utils", flags)

    return install


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        (("mamba-ssm", "fla"), "mamba-ssm"),
        (("fla",), "fla"),
        (("mamba-ssm",), "mamba-ssm"),
        ((), "torch"),
    ],
)
def test_cuda_auto_picks_what_imports(gpu_libraries, present, expected):
    gpu_libraries(*present)
    assert resolve_scan("auto", "cuda") == expected
    assert resolve_scan("torch", "cuda") == "torch"


def test_cuda_refuses_a_named_library_that_does_not_import(gpu_libraries):
    gpu_libraries("fla")
    assert resolve_scan("fla", "cuda") == "fla"
    with pytest.raises(KernelUnavailable, match=r"^model.scan=mamba-ssm but [^\n]+$"):
        resolve_scan("mamba-ssm", "cuda")
    gpu_libraries()
    with pytest.raises(KernelUnavailable, match=r"^model.scan=fla but [^\n]+$"):
        resolve_scan("fla", "cuda")


HOPPER_BAD_TRITON = {
    "IS_NVIDIA_HOPPER": True,
    "TRITON_ABOVE_3_4_0": True,
    "TRITON_ABOVE_3_7_1": False,
}


def test_fla_declared_broken_here_is_refused_and_auto_passes_it_over(gpu_libraries):
    # as on an H200 with Triton 3.6: fla-core's own flags say its gated backward is wrong there
    gpu_libraries("fla", fla_flags=HOPPER_BAD_TRITON)
    with pytest.raises(
        KernelUnavailable, match=r"^model.scan=fla: fla-core declares [^\n]+3\.7\.1"
    ):
        resolve_scan("fla", "cuda")
    assert resolve_scan("auto", "cuda") == "torch"
    gpu_libraries("fla", "mamba-ssm", fla_flags=HOPPER_BAD_TRITON)
    assert resolve_scan("auto", "cuda") == "mamba-ssm"
    # Triton fixed, or not a Hopper GPU, or an fla-core that declares nothing: usable
    for flags in (
        {**HOPPER_BAD_TRITON, "TRITON_ABOVE_3_7_1": True},
        {**HOPPER_BAD_TRITON, "IS_NVIDIA_HOPPER": False},
        {},
    ):
        gpu_libraries("fla", fla_flags=flags)
        assert resolve_scan("fla", "cuda") == resolve_scan("auto", "cuda") == "fla"


def simple_gla(q, k, v, g, scale, initial_state=None):
    """fla's ``chunk_simple_gla`` as its docstring defines it, stepped: per head
    S_t = exp(g_t) S_{t-1} + k_tᵀ v_t (K × V), o_t = scale · q_t S_t."""
    batch, seq_len, heads, dim_k = q.shape
    S = q.new_zeros(batch, heads, dim_k, v.shape[-1]) if initial_state is None else initial_state
    out = []
    for t in range(seq_len):
        S = torch.exp(g[:, t])[..., None, None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        out.append(scale * (q[:, t, :, None, :] @ S).squeeze(-2))
    return torch.stack(out, 1), S


def test_fla_mapping_computes_the_mamba2_recurrence(gpu_libraries):
    """q = C, k = B, v = dt·x, g = dt·A, scale = 1 (the mapping in kernels.py), checked on CPU
    with fla's function replaced by its definition."""
    gpu_libraries("fla")
    calls = []

    def chunk_simple_gla(q, k, v, g, scale=None, **kwargs):
        calls.append((q.shape, k.shape, v.shape, g.shape, scale, kwargs))
        return simple_gla(q, k, v, g, scale)

    sys.modules[MODULES["fla"]].chunk_simple_gla = chunk_simple_gla
    inputs = scan_inputs(2, 21, 4, 3, 2, 5)
    assert scan_function("fla", "cuda") is fla_scan
    ours = fla_scan(*inputs, chunk_size=8)
    torch.testing.assert_close(ours, recurrence(*inputs), rtol=1e-10, atol=1e-10)
    for a, b in zip(grads(ours, inputs), grads(recurrence(*inputs), inputs), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    assert calls[0] == ((2, 21, 4, 5), (2, 21, 4, 5), (2, 21, 4, 3), (2, 21, 4), 1.0, {})


def test_fla_mapping_carries_the_state_in_and_out(gpu_libraries):
    """fla's state is ours transposed (K × V = N × P): a sequence split in two, the second
    piece started from the first's final state, is the whole sequence's scan."""
    gpu_libraries("fla")

    def chunk_simple_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False):
        out, S = simple_gla(q, k, v, g, scale, initial_state)
        return out, (S if output_final_state else None)

    sys.modules[MODULES["fla"]].chunk_simple_gla = chunk_simple_gla
    x, dt, A, B, C = scan_inputs(2, 21, 4, 3, 2, 5)
    whole, state = ssd_scan(x, dt, A, B, C, chunk_size=8, return_final_state=True)
    y1, s1 = fla_scan(
        x[:, :9], dt[:, :9], A, B[:, :9], C[:, :9], chunk_size=8, return_final_state=True
    )
    assert s1.shape == (2, 4, 3, 5)
    y2, s2 = fla_scan(
        x[:, 9:], dt[:, 9:], A, B[:, 9:], C[:, 9:], chunk_size=8, initial_state=s1,
        return_final_state=True,
    )  # fmt: skip
    torch.testing.assert_close(torch.cat([y1, y2], 1), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s2, state, rtol=1e-10, atol=1e-10)


def test_mamba_ssm_call_passes_our_layout(gpu_libraries):
    gpu_libraries("mamba-ssm")
    seen = {}

    def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, **kwargs):
        seen.update(chunk=chunk_size, kwargs=kwargs)
        return recurrence(x, dt, A, B, C)

    sys.modules[MODULES["mamba-ssm"]].mamba_chunk_scan_combined = mamba_chunk_scan_combined
    inputs = scan_inputs(1, 9, 2, 3, 1, 4)
    out = scan_function("mamba-ssm", "cuda")(*inputs, chunk_size=256)
    torch.testing.assert_close(out, recurrence(*inputs))
    assert seen == {"chunk": 256, "kwargs": {}}
    state = torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    scan_function("mamba-ssm", "cuda")(
        *inputs, chunk_size=256, initial_state=state, return_final_state=True
    )
    assert seen["kwargs"] == {"initial_states": state, "return_final_states": True}


# -- the GPU kernels against the torch scan ------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["fla", "mamba-ssm"])
def test_gpu_kernel_matches_the_torch_scan(backend):
    if not mamba2_kernels.importable(backend):
        pytest.skip(f"{MODULES[backend]} does not import here")
    if broken := mamba2_kernels.declared_broken(backend):
        pytest.skip(broken)
    torch.manual_seed(0)
    info = model_info("mamba2", "125m")  # 24 heads × 64, N 128, one group, Q 256
    batch, seq_len, heads, state = 2, 2048, info.n_heads, info.d_state
    head_dim = info.d_inner // heads
    device = torch.device("cuda")
    x = torch.randn(batch, seq_len, heads, head_dim, device=device)
    dt = F.softplus(torch.randn(batch, seq_len, heads, device=device) - 4.0)
    A = -torch.arange(1.0, heads + 1.0, device=device)
    B = torch.randn(batch, seq_len, 1, state, device=device) / state**0.5
    C = torch.randn(batch, seq_len, 1, state, device=device) / state**0.5
    # float32: the kernels' tl.dot may run in TF32; bf16: inputs and outputs rounded to 8 bits
    for dtype, rtol in [(torch.float32, 5e-3), (torch.bfloat16, 5e-2)]:
        inputs = [t.detach().to(dtype).requires_grad_() for t in (x, dt, B, C)]
        x_, dt_, B_, C_ = inputs
        A_ = A.clone().requires_grad_()
        ref_inputs = [t.detach().float().requires_grad_() for t in (x_, dt_, A_, B_, C_)]
        ref = ssd_scan(*ref_inputs, chunk_size=info.chunk_size)
        out = scan_function(backend, "cuda")(x_, dt_, A_, B_, C_, chunk_size=info.chunk_size)
        scale = ref.abs().max().item()
        torch.testing.assert_close(out.float(), ref, rtol=rtol, atol=rtol * scale)
        got = grads(out.float(), [x_, dt_, A_, B_, C_])
        want = grads(ref, ref_inputs)
        for name, a, b in zip("x dt A B C".split(), got, want, strict=True):
            tol = rtol * b.abs().max().item()
            torch.testing.assert_close(a.float(), b, rtol=rtol, atol=tol, msg=f"{dtype} {name}")


# -- where a strategy has no form for Mamba-2: one line, exit 2, nothing written -------------


@pytest.mark.parametrize(
    ("workload", "settings", "named"),
    [
        ("hybrid", ["layout=tp2-dps2"], "layout.tp=2 does not divide the 1 SSM groups (n_groups)"),
        ("transformer-vs-mamba", ["model.scan=fla"], "model.scan=fla is a CUDA kernel; on cpu"),
        ("transformer-vs-mamba", ["model.scan=native"], "model.scan=native is a Mamba-1 kernel"),
    ],
)
def test_what_mamba2_cannot_do_is_one_line_and_writes_nothing(tmp_path, workload, settings, named):
    from click.testing import CliRunner

    from greenbench.cli import main

    db = tmp_path / "r.duckdb"
    sets = [arg for s in ["model.family=mamba2", *settings] for arg in ("--set", s)]
    args = ["run", "--workload", workload, "--device", "cpu", *sets, "--db", str(db)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert named in line and line.startswith("error: "), line
    assert not db.exists()
