"""What the launcher makes of a user workload's configuration: no model family to resolve, the
columns of greenbench's own model and data filled from the workload, and where its FLOPs came
from said in every repeat."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from greenbench.launcher.resolve import resolve_spec
from greenbench.launcher.runners import Peak, RunContext
from greenbench.launcher.runners.torchrun import TorchrunRunner
from greenbench.rank import user_run
from greenbench.spec import expand
from greenbench.user import FLOPS_COUNTED, FLOPS_GIVEN

MODULE = """
    import torch
    from greenbench import Batch, Workload

    def workload(flops=None):
        return Workload(
            name="lin", build_model=lambda ctx: torch.nn.Linear(2, 2),
            batch=lambda ctx, step: Batch(torch.zeros(1, 2), 1), loss=lambda m, x: m(x).sum(),
            flops_per_token=flops, settings={"k": 1}, seq_len=16,
        )

    def given():
        return workload(flops=12.0)
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "gbur_bench.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "gbur_bench"


def test_a_user_run_is_resolved_and_recorded_from_its_workload(module: str):
    (spec,) = expand(f"{module}:workload", [{"device": "cpu"}])
    spec = resolve_spec(spec)
    assert spec["train.compile"] == "off" and spec["precision"] == "fp32"
    assert "model.scan" not in spec.settings and "model.liger" not in spec.settings
    fingerprint = {"versions": {"greenbench": "0.1.0"}, "git_sha": "abc"}
    ctx = RunContext("r1", fingerprint, (475.0, "world"), Peak(None, None, "cpu:x"))
    row = TorchrunRunner().record(spec, ctx).row()
    assert (row["model_family"], row["model_size"], row["seq_len"]) == ("user", "lin", 16)
    assert row["workload"] == f"{module}:workload" and row["lengths"] == "user"
    versions = json.loads(row["versions"])
    assert versions["greenbench"] == "0.1.0"
    assert versions["workload"]["entry_point"] == f"{module}:workload"
    assert json.loads(row["kernels"]) == {"optimizer": "adamw-foreach"}


def test_every_repeat_says_whether_its_flops_were_given_or_counted(module: str):
    (counted,) = expand(f"{module}:workload", [])
    (given,) = expand(f"{module}:given", [])
    assert user_run.flops_note(counted) == FLOPS_COUNTED
    assert user_run.flops_note(given) == FLOPS_GIVEN
