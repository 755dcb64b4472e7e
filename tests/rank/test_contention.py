"""A run on a shared machine says so: another greenbench run, or other processes keeping the
CPU busy, make it `contended` with a warning. Real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from greenbench.rank.contention import ContentionWatch, other_greenbench_processes

pytestmark = pytest.mark.slow


def test_a_busy_process_outside_the_run_makes_it_contended():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        with ContentionWatch() as watch:
            time.sleep(1.5)
    finally:
        busy.kill()
        busy.wait()
    assert watch.contended is True
    assert watch.others_busy_cores is not None and watch.others_busy_cores > 0.5
    assert "cores busy meanwhile" in watch.reason


def test_another_greenbench_run_is_counted_never_named(tmp_path: Path):
    # a process that looks like `greenbench run`, outside this process's tree (reparented), with
    # a private path and label on its command line: the stored warning and the columns the views
    # read carry a count of such processes, never their pids or command lines
    pidfile = tmp_path / "pid"
    sleeper = "import time; time.sleep(30)"
    private = "/home/someone/secret-project --label confidential-label"
    subprocess.run(
        ["sh", "-c",
         f"{sys.executable} -c '{sleeper}' greenbench run {private} & echo $! > {pidfile}"],
        check=True,
        start_new_session=True,
    )  # fmt: skip
    pid = int(pidfile.read_text())
    try:
        assert pid not in {p.pid for p in psutil.Process().children(recursive=True)}
        assert other_greenbench_processes().get(pid) == "run"
        with ContentionWatch() as watch:
            time.sleep(0.2)
        assert watch.contended is True and watch.other_greenbench is not None
        assert watch.other_greenbench >= 1
        assert "other greenbench process" in watch.reason
        assert str(pid) not in watch.reason
        assert "secret-project" not in watch.reason and "confidential" not in watch.reason
        assert "time.sleep" not in watch.reason
    finally:
        os.kill(pid, signal.SIGKILL)


class _SleepingMeter:
    """A meter whose idle sample is a sleep: what the launcher's watch sees is the machine."""

    source = "estimate"

    def idle_power_w(self, seconds: float) -> float:
        time.sleep(seconds)
        return 10.0

    def close(self) -> None:
        pass


def test_an_idle_sample_taken_on_a_busy_machine_is_unreliable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    import greenbench.energy
    from greenbench.launcher.idle import IdleCache, IdlePower
    from greenbench.settings.runspec import RunSpec

    monkeypatch.setattr(greenbench.energy, "select_meter", lambda *a, **k: _SleepingMeter())
    spec = RunSpec(
        "transformer-vs-mamba",
        {"device": "cpu", "energy.source": "auto", "energy.idle_s": 1.5, "nproc": 1},
    )
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        cache = IdleCache(tmp_path / "idle.json")
        baseline = IdlePower(cache).get(spec)
    finally:
        busy.kill()
        busy.wait()
    assert baseline.watts == 10.0  # what was sampled, kept to say why it is not used
    why = baseline.why
    assert why.startswith("idle power sampled while ") and "cores busy" in why
    # not kept, so not reused: the next configuration samples again
    assert not (tmp_path / "idle.json").exists() and cache._mine == {}
