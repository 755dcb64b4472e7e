"""benchmarks/planner.py on the synthetic CPU runs: it calibrates on the kinds named, scores the
rest, names the categories with no runs, and refuses a database without this host's runs."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from greenbench.vocabulary import Layout

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "planner.py"


@functools.cache
def benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("planner_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("layout", "kind"),
    [
        (Layout(), "single"),
        (Layout(dp_shard=4), "dp"),
        (Layout(dp_replicate=2, dp_shard=2), "dp"),
        (Layout(tp=2), "tp"),
        (Layout(pp=2), "pp"),
        (Layout(cp=2), "cp"),
        (Layout(dp_shard=2, tp=2), "mixed"),
        (Layout(tp=2, pp=2), "mixed"),
    ],
)
def test_layout_kinds(layout: Layout, kind: str) -> None:
    assert benchmark().kind(layout) == kind


def test_calibrates_on_single_ranks_and_scores_the_rest(
    cpu_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--db", str(cpu_db), "--calibrate-on", "single", "--no-run-top"]
    assert benchmark().main(args) == 0
    out = capsys.readouterr().out
    assert "calibrated per family on layouts single" in out
    assert "sustained: 80.0 GFLOP/s per core (1 runs)" in out
    assert "transformer: matmuls" in out and "(sdpa" not in out  # the runs store no kernels
    held_out = out.split("held-out runs (scored)")[1].split("model state of the busiest")[0]
    assert "cccc00000001" in held_out and "cccc00000005" not in held_out
    assert "cccc00000004  transformer/tiny" in out and "rows are not full" in out
    assert "median |step-time error|" in out and "(goal ≤ 25%, 3 runs)" in out
    assert "model state: median |error|" in out and "(goal ≤ 15%)" in out
    assert "process peak: median |error|" in out
    assert "mamba: median" not in out  # no mamba run stored: not judged
    assert "Spearman over the hybrid suite: fewer than 3 of its runs scored" in out
    assert "plan --run-top 3 regret: not run (--no-run-top)" in out


def test_no_runs_of_this_host_is_one_line_and_exit_2(
    tmp_path: Path, cpu_runs_writer, capsys: pytest.CaptureFixture[str]
) -> None:
    db = cpu_runs_writer(tmp_path / "elsewhere.duckdb", host="elsewhere")
    assert benchmark().main(["--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CPU run of this host" in err[0]


def test_contention_is_read_from_the_runs_warning() -> None:
    b = benchmark()
    assert b.contention({"contended": False}) == 0.0
    busy = "contended: other processes kept 0.42 of 2 cores busy meanwhile (figures may be skewed)"
    assert b.contention({"contended": True, "warnings": [busy]}) == 0.42
    assert b.contention({"contended": True, "warnings": ["something else"]}) == float("inf")


def test_each_configuration_is_scored_by_its_quietest_newest_run() -> None:
    from datetime import datetime

    def run(run_id: str, day: int, busy: float | None) -> dict:
        warnings = [f"contended: other processes kept {busy} of 2 cores busy"] if busy else None
        return {"run_id": run_id, "config_key": "k", "started_at": datetime(2026, 11, day),
                "contended": busy is not None, "warnings": warnings}  # fmt: skip

    b = benchmark()
    runs = [run("old", 1, None), run("new", 2, None), run("busy", 3, 0.3)]
    picked = b.one_per_configuration(runs)
    assert [r["run_id"] for r in picked] == ["new"]
