"""The phase channel from a configuration's ranks to the launcher's progress display: rank 0
writes its phase to the run's working folder, the launcher reads the newer of its own phase
and the ranks', and the display shows each change once (a line per change away from a
terminal, never a line per poll)."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from greenbench.launcher import progress
from greenbench.launcher.durations import Eta
from greenbench.launcher.phases import RunPhases
from greenbench.rank import phase


@pytest.fixture(autouse=True)
def _closed_channel() -> object:
    yield
    phase.open_phases(None, 0)


def test_rank_0_writes_its_phase_and_the_launcher_reads_it(tmp_path: Path) -> None:
    phase.open_phases(tmp_path, rank=0)
    phase.tell("repeat", index=2, of=3, steps=4)
    record = phase.read_phase(tmp_path)
    assert record is not None and record["phase"] == "repeat" and record["attempt"] == 0
    assert phase.describe(record) == "repeat 2/3 (4 steps)"
    assert sorted(p.name for p in tmp_path.iterdir()) == [phase.PHASE_FILE]  # no temporary left
    phases = RunPhases()
    phases.tell("starting 1 rank(s)")  # the launcher's phase, before the rank's newer one
    phases.watch(tmp_path)
    time.sleep(0.01)
    phase.tell("warm-up", steps=1)
    assert phases.current() == "warm-up (1 step)"
    phases.tell("aggregating the results")  # the launcher's again: newer than the rank's
    assert phases.current() == "aggregating the results"
    phases.tell(None)
    assert phases.current() is None


def test_other_ranks_and_code_outside_a_worker_write_nothing(tmp_path: Path) -> None:
    phase.tell("warm-up")  # no channel open: nothing, no error
    phase.open_phases(tmp_path, rank=1)
    phase.tell("warm-up")
    assert list(tmp_path.iterdir()) == []
    assert phase.read_phase(tmp_path) is None


def test_a_restarted_attempt_and_a_run_to_a_target_say_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    phase.open_phases(tmp_path, rank=0)
    phase.tell("evaluation", index=4, repeat=1, repeats=3)
    assert phase.describe(phase.read_phase(tmp_path)) == "restart 1: repeat 1/3: evaluation 4"
    (tmp_path / phase.PHASE_FILE).write_text("{not json")  # never half a file, but if so
    assert phase.read_phase(tmp_path) is None


def live(interactive: bool) -> tuple[progress.LiveRun, io.StringIO]:
    out = io.StringIO()
    console = Console(
        file=out, force_terminal=interactive, force_interactive=interactive, width=200
    )
    bar = progress.progress_bar(console, eta=True)
    return progress.LiveRun(bar, bar.add_task("starting", total=2, eta=""), Path("none")), out


def test_away_from_a_terminal_each_phase_change_is_one_line(tmp_path: Path) -> None:
    run, out = live(interactive=False)
    spec = SimpleNamespace(name="cfg")
    run._index = {id(spec): 0}
    run.eta = Eta({0: 100.0, 1: 50.0})
    run.start(spec, "cfg")
    run.phases.tell("idle baseline (1 s)")
    run.phases.watch(tmp_path)
    for _ in range(5):  # polled many times: one line
        run.refresh()
    phase.open_phases(tmp_path, rank=0)
    time.sleep(0.01)
    phase.tell("repeat", index=1, of=2)
    run.refresh()
    run.refresh()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("  cfg: idle baseline (1 s) (config ~")
    assert "run ~2 min" in lines[0] and lines[0].endswith(" left)")  # 100 s of this, 50 of next
    assert lines[1].startswith("  cfg: repeat 1/2 (config ~")


def test_on_a_terminal_the_bar_shows_the_phase_and_prints_no_line(tmp_path: Path) -> None:
    run, out = live(interactive=True)
    spec = SimpleNamespace(name="cfg")
    run.start(spec, "cfg")
    run.phases.tell("starting 2 rank(s)")
    run.refresh()
    task = run.progress.tasks[0]
    assert task.description == "cfg · starting 2 rank(s)"
    assert task.fields["eta"] == ""  # no plan told: no ETA, nothing invented
    assert out.getvalue() == ""


def test_the_worker_tells_its_phases_through_a_real_run(tmp_path: Path) -> None:
    """A real one-rank worker writes its phases as it goes; the last it wrote is the results'
    gathering (the file stays in the run's working folder)."""
    import subprocess
    import sys

    from greenbench.launcher.resolve import resolve_spec
    from greenbench.spec import expand
    from tests.helpers import QUICK

    (spec,) = expand("transformer-vs-mamba", [QUICK])
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(resolve_spec(spec).to_json())
    done = subprocess.run(
        [sys.executable, "-m", "greenbench.rank.worker", "--spec", str(spec_file), "--out",
         str(tmp_path)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / phase.PHASE_FILE).read_text())
    assert record["phase"] == "gathering results"
    assert (tmp_path / "results.json").exists()
