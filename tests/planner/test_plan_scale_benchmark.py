"""benchmarks/plan_scale.py in its quick mode: it runs the real `greenbench plan` for a small
count and a 23-digit one, and prints each one's wall time, exit code, verdict against the goal
and first line (the times are printed, never asserted)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "plan_scale.py"


@functools.cache
def benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plan_scale_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
def test_quick_runs_the_command_and_reports_each_count(capsys) -> None:
    assert benchmark().main(["--quick"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "goal ≤ 5 s" in out[0]
    (small,) = [line for line in out if line.split()[:1] == ["64"]]
    fields = small.split()
    assert float(fields[1]) > 0 and fields[2] == "0" and fields[3] in ("yes", "no")
    assert "seq 4096, global batch 512" in small
    (huge,) = [line for line in out if line.split()[:1] == ["99999999999999999999999"]]
    fields = huge.split()
    assert fields[2] == "2" and fields[3] in ("yes", "no")
    assert "error: invalid value for '--devices': must be at most 1,073,741,824" in huge


def test_a_run_past_its_timeout_is_reported_not_raised() -> None:
    timed = benchmark().run_plan("64", (), timeout_s=0.001)
    assert timed.code is None and not timed.within_goal
    assert timed.first_line == "no answer within 0.001 s"
