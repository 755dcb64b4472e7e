"""A suite run on GPUs is never refused whole: with ``torch.cuda`` faked (one H100 visible),
``greenbench run --suite posttrain --device cuda`` hands the runner the configurations that would
run and stores every other one ``skipped`` with its reason, training nothing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.launcher.runners.torchrun import TorchrunRunner
from greenbench.results import RunOutcome
from greenbench.store import read_frame

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def one_fake_gpu(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``torch.cuda`` that sees one H100; the runner records what it is asked to run instead of
    training it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: H100)
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda *_: SimpleNamespace(name=H100, total_memory=80 * 2**30, multi_processor_count=132),
    )
    asked: list[str] = []

    def run(self, spec, ctx):
        asked.append(spec.name)
        return RunOutcome(status="failed", error="not trained: this test fakes its GPU")

    monkeypatch.setattr(TorchrunRunner, "run", run)
    return asked


def test_posttrain_on_a_gpu_skips_what_cannot_run_there_and_runs_the_rest(tmp_path, one_fake_gpu):
    db = tmp_path / "r.duckdb"
    args = ["run", "--suite", "posttrain", "--device", "cuda", "--db", str(db)]
    result = CliRunner().invoke(main, [*args, "--set", "energy.idle_s=0"])
    assert result.exit_code in (0, 1), result.output
    runs = read_frame(db, "SELECT config_name, strategy, nproc, status, error FROM runs")
    skipped = runs[runs.status == "skipped"]
    asked = runs[runs.status != "skipped"]
    assert len(asked) == len(one_fake_gpu) > 0 and set(asked.config_name) == set(one_fake_gpu)
    assert (asked.nproc == 1).all()  # one GPU: only one-rank configurations would run
    # every configuration is accounted for: each skipped one with its reason
    assert skipped.error.str.len().gt(0).all()
    odc = skipped[skipped.strategy == "odc"]
    assert len(odc) and odc.error.str.contains("odc.transport=shm runs on CPU ranks").all()
    others = skipped[skipped.strategy != "odc"]
    assert others.error.str.contains("needs .* device\\(s\\) per node", regex=True).all()
