"""The Transformer with liger-kernel's fused kernels (``model.liger``): the fused loss is the
same function as the strategy's loss from logits (value and gradients), what ``auto`` becomes
where, and the refusals.

liger's kernels are Triton kernels. On CPU they run under Triton's interpreter, which is read
when a kernel module is imported, so the interpreted checks run in a subprocess started with
``TRITON_INTERPRET=1`` (the setting never leaks into this pytest process). There only the
fused linear cross-entropy is applied (`greenbench.models.transformer.fused`); the ``cuda`` test
applies all four kernels on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import QUICK

from greenbench.errors import KernelUnavailable, SpecError
from greenbench.launcher.resolve import resolve_spec
from greenbench.models.transformer import fused
from greenbench.settings import spec_identity
from greenbench.spec import expand
from greenbench.store import read_frame

pytest.importorskip("liger_kernel")

COMPARE = r"""
import json, sys, torch
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.sources.builtin import forward_fused_loss, forward_logits
import torch.nn.functional as F

device = sys.argv[1]
ids = torch.randint(0, 1024, (2, 48), generator=torch.Generator().manual_seed(0)).to(device)
labels = ids.clone()
labels[1, 40:] = -100  # padding
positions = torch.arange(48, device=device).expand(2, -1)
out = {}
for fused in (False, True):
    model = ModelBuilder(FAMILIES["transformer"], "tiny", 0, fused=fused).build(device)
    if fused:
        loss = forward_fused_loss(model, ids, positions, labels)
    else:
        logits = forward_logits(model, ids, positions)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(),
                               ignore_index=-100, reduction="sum")
    loss.backward()
    grads = {n: p.grad.double().norm().item() for n, p in model.named_parameters()}
    out[str(fused)] = {"loss": loss.item(), "grads": grads}
print(json.dumps(out))
"""


def compare(device: str, env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", COMPARE, device],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_same_function(out: dict, rel: float) -> None:
    eager, liger = out["False"], out["True"]
    assert liger["loss"] == pytest.approx(eager["loss"], rel=rel)
    assert liger["grads"].keys() == eager["grads"].keys()
    for name, norm in eager["grads"].items():
        assert liger["grads"][name] == pytest.approx(norm, rel=rel, abs=1e-6), name


def test_the_fused_loss_is_the_summed_loss_from_logits_under_the_interpreter():
    assert_same_function(compare("cpu", {"TRITON_INTERPRET": "1"}), rel=1e-4)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_all_four_kernels_on_a_gpu_compute_the_same_function():
    assert_same_function(compare("cuda", {}), rel=2e-3)


def spec_of(**settings):
    (spec,) = expand("transformer-vs-mamba", [{**QUICK, **settings}])
    return spec


def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # CUDA faked at its boundary
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_auto_uses_liger_for_the_transformer_on_cuda_where_installed_and_not_compiled(
    monkeypatch,
):
    fake_cuda(monkeypatch)
    eager = {"train.compile": "off"}
    assert resolve_spec(spec_of(device="cuda", **eager))["model.liger"] == "on"
    # compiled (auto compiles the Transformer on CUDA): the compiler fuses, liger stays off
    compiled = resolve_spec(spec_of(device="cuda"))
    assert (compiled["train.compile"], compiled["model.liger"]) == ("on", "off")
    both = resolve_spec(spec_of(device="cuda", **{"model.liger": "on"}))
    assert (both["train.compile"], both["model.liger"]) == ("on", "on")  # asked for: kept
    assert resolve_spec(spec_of(device="cpu"))["model.liger"] == "off"
    mamba = spec_of(device="cuda", **{"model.family": "mamba", "model.scan": "torch"}, **eager)
    assert resolve_spec(mamba)["model.liger"] == "off"
    monkeypatch.setattr(fused, "liger_available", lambda: False)
    assert resolve_spec(spec_of(device="cuda", **eager))["model.liger"] == "off"


def test_an_unfused_run_keeps_its_identity():
    spec = resolve_spec(spec_of(device="cpu"))
    assert "model.liger" not in spec_identity(spec)


@pytest.mark.parametrize(
    ("settings", "error", "named"),
    [
        ({"model.family": "mamba"}, SpecError, "applies to the transformer family"),
        ({"device": "cpu"}, KernelUnavailable, "only under Triton's interpreter"),
    ],
)
def test_on_where_it_cannot_run_is_refused_with_the_reason(monkeypatch, settings, error, named):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(error, match=named):
        resolve_spec(spec_of(**{"device": "cpu", "model.liger": "on", **settings}))


@pytest.mark.slow
def test_a_fused_run_stores_its_kernels_and_the_same_loss(tmp_path):
    """Through the CLI and the worker (interpreted on CPU): the run with liger's loss records
    the kernel and trains the same function as the run without. One command sweeps
    ``model.liger=off,on``: two configurations, each in its own worker, one launcher. Each step
    is one microbatch of both sequences: the interpreter's backward costs seconds a microbatch
    (its loss, scaled by 1/tokens, multiplies the vocabulary's gradient row by row)."""
    db = tmp_path / "r.duckdb"
    script = "import sys; from greenbench.cli import main; sys.exit(main())"
    one_micro = {**QUICK, "data.micro_batch": QUICK["data.global_batch"]}
    quick = [a for k, v in one_micro.items() if k != "repeats" for a in ("--set", f"{k}={v}")]
    done = subprocess.run(
        [sys.executable, "-c", script, "run", "--workload", "transformer-vs-mamba",
         "--device", "cpu", "--db", str(db), "--repeats", "1", *quick,
         "--set", "model.liger=off,on"],
        capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"},
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    runs = read_frame(db, "SELECT r.kernels, p.loss FROM runs r JOIN results p USING (run_id)")
    assert len(runs) == 2  # one run each, of one repeat: the losses of the same steps
    by_kernels = {json.loads(k).get("loss", "torch"): loss for k, loss in runs.values}
    assert by_kernels["liger-fused-linear-cross-entropy"] == pytest.approx(
        by_kernels["torch"], rel=1e-4
    )
