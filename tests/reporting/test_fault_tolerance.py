"""greenbench.reporting.fault_tolerance and its report section: each checkpoint interval's
energy lost per failure, its parts, goodput and checkpoint costs read from runs written by the
real Store; the Young/Daly optimum from the pooled measurements; the statements computed
("cannot tell" with one run per interval, a verdict where two seeds' ranges part); the PNG
written; nothing where no fault-tolerant run is stored."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from fault_helpers import (
    DELTA_S,
    KILL_AT,
    ONE_EACH,
    POWER_W,
    RESTART_NOTE,
    RESTART_S,
    STEP_S,
    STEPS,
    TWO_SEEDS,
    FaultRun,
    write_fault_runs,
)

from greenbench.reporting.fault_tolerance import (
    event_notes,
    group_optimum,
    read_events,
    read_intervals,
)
from greenbench.reporting.report import write_report
from greenbench.reporting.sections.fault_tolerance import (
    PNG,
    TITLE,
    least_waste,
    section_lines,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return write_fault_runs(tmp_path / "f.duckdb", ONE_EACH)


def test_each_interval_reads_its_figures_by_hand(db: Path):
    table = read_intervals(db)
    assert list(table["every"]) == [2, 4, 8]  # the plain run is not fault-tolerant
    assert table["group"].nunique() == 1
    for _, r in table.iterrows():
        run = FaultRun("x", int(r["every"]))
        redone = KILL_AT % run.every  # 1, 3, 7 steps since the last checkpoint
        assert r["redone_steps_per_failure"] == pytest.approx(redone)
        assert r["redone_per_failure_s"] == pytest.approx(redone * STEP_S)
        assert r["redone_per_failure_j"] == pytest.approx(POWER_W * redone * STEP_S)
        assert r["restart_per_failure_j"] == pytest.approx(POWER_W * RESTART_S)
        assert r["lost_per_failure_j"] == pytest.approx(POWER_W * (redone * STEP_S + RESTART_S))
        assert r["goodput"] == pytest.approx(STEPS / (STEPS + redone))
        assert r["ckpt_count"] == run.checkpoints
        assert r["delta_s"] == pytest.approx(DELTA_S)
        assert r["step_s"] == pytest.approx(STEP_S)  # the seconds less ckpt, redone, restart
        spent = run.checkpoints * DELTA_S + redone * STEP_S + RESTART_S
        assert r["waste"] == pytest.approx(spent / run.figures()["seconds"])
        assert r["overhead_j"] == pytest.approx(POWER_W * spent)
        assert r["energy"] == "estimate" and r["lost_per_failure_j_n"] == 1
    assert list(table["ckpt_count"]) == [8, 4, 2]


def test_the_optimum_pools_the_groups_measurements(db: Path):
    table = read_intervals(db)
    o = group_optimum(table)
    assert o is not None
    assert o.delta_s == pytest.approx(DELTA_S)  # Σ ckpt seconds ÷ Σ checkpoints
    assert o.restart_s == pytest.approx(RESTART_S)
    seconds = sorted(FaultRun("x", e).figures()["seconds"] for e in (2, 4, 8))
    assert o.mtbf_s == pytest.approx(seconds[1])  # the median run's seconds per failure
    assert o.young_steps == pytest.approx(math.sqrt(2 * DELTA_S * seconds[1]) / STEP_S)


def test_one_run_per_interval_cannot_tell(db: Path, tmp_path: Path):
    table = read_intervals(db)
    lines = section_lines(table, tmp_path)
    text = "\n".join(lines)
    assert f"## {TITLE}" in text
    assert "**cannot tell which loses less**" in text
    assert "One run per interval: no interval to judge on" in text
    assert "Young's τ* = √(2δM)" in text and "the rate the injected failure sets" in text
    assert "estimate: time × modelled power" in text  # energy on this machine is an estimate
    assert (tmp_path / PNG).read_bytes().startswith(PNG_MAGIC)
    best, how = least_waste(table)
    assert best in (2, 4) and "cannot tell" in how


def test_two_seeds_whose_ranges_part_are_told_apart(tmp_path: Path):
    db = write_fault_runs(tmp_path / "s.duckdb", TWO_SEEDS)
    table = read_intervals(db)
    assert list(table["runs"]) == [2, 2, 2] and list(table["lost_per_failure_j_n"]) == [2, 2, 2]
    text = "\n".join(section_lines(table, tmp_path))
    # every 2 redoes 1 step, every 4 three: 244–248.9 J against 252–257 J per failure
    assert "every 2 steps against every 4: **less energy lost** per failure" in text
    assert "every 4 steps against every 8: **less energy lost** per failure" in text
    assert "min–max ranges of as few as 2 runs" in text


def test_the_events_are_read_with_their_notes(db: Path):
    events = read_events(db, ["e4"])
    kinds = list(events["kind"])
    assert kinds[:3] == ["checkpoint"] * 3 and "failure" in kinds and "redone" in kinds
    assert list(events["seq"]) == list(range(len(events)))
    assert event_notes(events) == {"restart": [RESTART_NOTE]}


def test_no_fault_tolerant_run_no_section(tmp_path: Path):
    db = write_fault_runs(tmp_path / "p.duckdb", [])  # the plain run only
    table = read_intervals(db)
    assert table.empty
    assert section_lines(table, tmp_path) == []
    assert read_intervals(tmp_path / "missing.duckdb").empty


def test_the_report_holds_the_section(db: Path, tmp_path: Path):
    out = tmp_path / "report"
    path = write_report(db, out)
    text = Path(path).read_text()
    assert f"## {TITLE}" in text
    assert (out / PNG).read_bytes().startswith(PNG_MAGIC)


def _benchmark():
    import importlib.util

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "fault_tolerance.py"
    spec = importlib.util.spec_from_file_location("fault_tolerance_benchmark", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_prints_each_interval_and_the_optimum(db: Path, tmp_path: Path, capsys):
    bench = _benchmark()
    assert bench.main(["--from-db", str(db), "--mtbf-s", "3600"]) == 0
    out = capsys.readouterr().out
    for every in (2, 4, 8):
        assert f"every   {every} steps (1 run)" in out
    assert "Young/Daly from δ = 0.05 s/checkpoint" in out and "at M = 3600 s (given)" in out
    assert "energy: estimate" in out
    empty = write_fault_runs(tmp_path / "none.duckdb", [])
    assert bench.main(["--from-db", str(empty)]) == 1
    assert "No fault-tolerant run is stored" in capsys.readouterr().out


def test_the_dashboard_reads_a_runs_events(db: Path):
    from greenbench.dashboard_app import data

    data.clear_cache()
    events = data.run_events(db, "e8")
    assert list(events["kind"]).count("checkpoint") == 2 and events["seq"].is_monotonic_increasing
    assert data.run_events(db, "plain").empty
