"""`greenbench plan --run-top K`: a bad K is one line and exit 2 before anything is planned or
run; a good one runs the planner's first K runnable layouts through the launcher, stores them
like any run, and prints the measured step times and the regret."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from greenbench.cli import main

TINY = ["plan", "--model-family", "transformer", "--size", "tiny", "--device-type", "host",
        "--precision", "fp32", "--seq-len", "32", "--global-batch", "2"]  # fmt: skip


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("k", ["0", "-1", "two", "1.5"])
def test_a_bad_k_is_one_line_and_exit_2(k: str, cpu_db: Path) -> None:
    result = run(*TINY, "--devices", "1", "--db", str(cpu_db), f"--run-top={k}")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "'--run-top': must be a whole number >= 1" in lines[0]


def test_set_without_run_top_is_refused(cpu_db: Path) -> None:
    result = run(*TINY, "--devices", "1", "--db", str(cpu_db), "--set", "repeats=1")
    assert result.exit_code == 2 and "--set goes with --run-top" in result.output


def test_run_top_runs_and_stores_the_first_layouts(cpu_db: Path) -> None:
    from greenbench.store import list_runs

    before = set(list_runs(cpu_db, limit=None).run_id)
    result = run(
        *TINY, "--devices", "2", "--db", str(cpu_db), "--rank-by", "time", "--run-top", "2",
        "--set", "repeats=1", "--set", "train.steps=1", "--set", "train.warmup_steps=0",
        "--set", "train.min_window_s=0",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    runs = list_runs(cpu_db, limit=None)
    new = runs[~runs.run_id.isin(before)]
    assert len(new) == 2 and set(new.status) == {"ok"}
    assert set(new.workload) == {"hybrid"} and set(new.nproc) == {2}
    out = result.output
    assert "the planner's first 2 runnable layouts" in out
    assert all(run_id in out for run_id in new.run_id)
    assert "regret = measured step time of the first pick / best of the 2" in out
