"""``greenbench measure -- COMMAND``: a whole process's energy, stored with its label as a
whole-process measurement; tokens from ``--tokens`` or the file the program writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.measuring.record import PROCESS_NOTE, PROCESS_STRATEGY

SCRIPT = """
import os, time
time.sleep(0.3)
with open(os.environ["GREENBENCH_TOKENS_FILE"], "w") as f:
    f.write("1200\\n")
"""


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def measure(*args: str):
    return CliRunner().invoke(main, ["measure", *args])


@pytest.mark.slow
def test_a_script_is_measured_as_a_whole_process(tmp_path: Path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    db = tmp_path / "r.duckdb"
    result = measure("--label", "nightly", "--db", str(db), "--", sys.executable, str(script))
    assert result.exit_code == 0, result.output
    assert "whole process" in result.stderr and "J/token" in result.stderr
    ((strategy, name, label, workload, status),) = rows(
        db, "SELECT strategy, config_name, label, workload, status FROM runs"
    )
    assert (strategy, label, status) == (PROCESS_STRATEGY, "nightly", "ok")
    assert name.startswith("whole process: ") and str(script) in name
    assert workload.startswith("process/")
    ((tokens, seconds, note, jpt),) = rows(
        db, "SELECT tokens, seconds, energy_note, joules_per_token FROM results"
    )
    assert tokens == 1200 and seconds >= 0.3 and jpt > 0
    assert note.startswith(PROCESS_NOTE)

    given = measure("--tokens", "50", "--db", str(db), "--", sys.executable, "-c", "pass")
    assert given.exit_code == 0, given.output
    assert [t for (t,) in rows(db, "SELECT tokens FROM results ORDER BY tokens")] == [50, 1200]


@pytest.mark.slow
def test_a_failing_command_passes_its_status_on_and_a_missing_one_writes_nothing(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    failed = measure("--db", str(db), "--", sys.executable, "-c", "raise SystemExit(3)")
    assert failed.exit_code == 3
    assert rows(db, "SELECT status, error FROM runs") == [
        ("failed", "the command exited with status 3")
    ]
    assert rows(db, "SELECT count(*) FROM results") == [(0,)]

    other = tmp_path / "other.duckdb"
    missing = measure("--db", str(other), "--", "no-such-command-here")
    assert missing.exit_code == 2
    (line,) = missing.stderr.strip().splitlines()
    assert "no-such-command-here" in line and not other.exists()


@pytest.mark.slow
def test_a_command_killed_by_a_signal_exits_as_a_shell_says(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    killed = measure("--db", str(db), "--", "sh", "-c", "kill -9 $$")
    assert killed.exit_code == 128 + 9, killed.output  # as sh and bash report it
    assert "killed by SIGKILL" in killed.stderr
    assert rows(db, "SELECT status, error FROM runs") == [
        ("failed", "the command was killed by signal 9 (SIGKILL); exit status 137")
    ]


@pytest.mark.parametrize("idle", ["inf", "nan", "61"])
def test_an_idle_time_that_is_no_finite_bounded_number_is_one_line_exit_2(tmp_path: Path, idle):
    db = tmp_path / "r.duckdb"
    result = measure("--idle-s", idle, "--db", str(db), "--", sys.executable, "-c", "pass")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "--idle-s" in line and idle in line, line
    assert not db.exists()


#: what the measured command prints on stderr once it runs: every import the measuring
#: greenbench reported before this line (``-X importtime`` writes each as it happens) came
#: before the command started
STARTED = "the measured command runs"
HEAVY = ("torch", "numpy", "scipy", "pandas", "duckdb", "transformers")


@pytest.mark.slow
def test_measure_imports_nothing_heavy_before_the_command_and_never_torch(tmp_path: Path):
    """The command starts as soon as greenbench can meter it: no torch, numpy, scipy, pandas
    or database import before it (the database is opened after it ends), and no torch at all
    (``--device auto`` asks NVML); what it cost is stored with the run."""
    db = tmp_path / "r.duckdb"
    command = f"import sys; print({STARTED!r}, file=sys.stderr)"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "greenbench", "measure", "--db", str(db),
         "--", sys.executable, "-c", command],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    before = lines[: lines.index(STARTED)]
    imported = [ln.rsplit("|", 1)[1].strip() for ln in lines if ln.startswith("import time:")]
    early = [ln.rsplit("|", 1)[1].strip() for ln in before if ln.startswith("import time:")]
    assert "greenbench.measuring.command" in early  # the check sees the measuring path
    assert not [m for m in early if m.split(".")[0] in HEAVY]
    assert "duckdb" in imported  # after the command: the run is stored
    assert not [m for m in imported if m.split(".")[0] == "torch"]
    ((startup, baseline, age, teardown),) = rows(
        db, "SELECT harness_startup_s, harness_baseline_s, idle_baseline_age_s, "
        "harness_teardown_s FROM runs"
    )  # fmt: skip
    assert startup > 0 and teardown >= 0
    assert baseline is None and age is None  # no idle baseline asked (--idle-s 0)


class _QuietWatch:
    def __enter__(self) -> _QuietWatch:
        return self

    def __exit__(self, *exc: object) -> bool:
        self.contended, self.others_busy_cores, self.seen = False, 0.0, ""
        return False


@pytest.mark.slow
def test_an_idle_baseline_taken_quiet_is_reused_by_the_next_measure_and_labelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The machine's contention is faked quiet at the watch: the first measure samples idle
    power, the second reuses it (no sampling, its age stored); ``--idle-max-age-s 0`` samples
    anew."""
    from greenbench.launcher import idle

    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(idle, "ContentionWatch", _QuietWatch)
    db = tmp_path / "r.duckdb"
    for extra in ([], [], ["--idle-max-age-s", "0"]):
        done = measure("--idle-s", "0.2", *extra, "--db", str(db), "--", sys.executable, "-c", "")
        assert done.exit_code == 0, done.output
    (first, second, third) = rows(
        db, "SELECT r.harness_baseline_s, r.idle_baseline_age_s, x.idle_power_w FROM runs r "
        "JOIN results x USING (run_id) ORDER BY r.started_at"
    )  # fmt: skip
    assert first[0] >= 0.2 and first[1] is None
    assert second[0] == 0 and second[1] > 0 and second[2] == first[2]  # reused, with its age
    assert third[0] >= 0.2 and third[1] is None  # max age 0: sampled again
