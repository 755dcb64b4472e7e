"""Failures cost only their own configuration: crashing, hanging, killed, out-of-memory ranks,
Ctrl-C / SIGTERM and SIGKILL of the launcher, and `--resume`.

Every test runs real worker processes (one rank, or two gloo ranks through torchrun).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import QUICK, rank_start_s

from greenbench.launcher.launch import run_specs
from greenbench.spec import expand
from greenbench.store import check_integrity, read_frame

pytestmark = pytest.mark.slow

TWO_RANKS = {"strategy": "ddp", "nproc": 2}


def spec(**overrides):
    settings = {**QUICK, **{k.replace("__", "."): v for k, v in overrides.items()}}
    return expand("transformer-vs-mamba", [settings])[0]


def descendants() -> list[psutil.Process]:
    """Live processes below this one, except those started before the current test (e.g.
    multiprocessing's resource tracker, left by an earlier test in the same session)."""
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if p.is_running() and p.pid not in _EARLIER
    ]


_EARLIER: set[int] = set()


@pytest.fixture(autouse=True)
def _earlier_children() -> None:
    _EARLIER.clear()
    _EARLIER.update(p.pid for p in psutil.Process().children(recursive=True))


def runs(db: Path):
    return read_frame(
        db, "SELECT config_name, status, error, failed_rank, config FROM runs ORDER BY started_at"
    )


def test_crash_hang_kill_oom_each_fail_alone(tmp_path):
    db = tmp_path / "r.duckdb"
    # the hanging rank must have started and reached its hang before the timeout, however busy
    # the machine is
    hang_timeout_s = round(15.0 + 2 * rank_start_s())
    specs = [
        spec(),
        spec(debug__fail_rank=1, **TWO_RANKS),
        spec(debug__hang_rank=0, timeout_s=float(hang_timeout_s)),
        spec(debug__kill_rank=1, **TWO_RANKS),
        spec(debug__oom_rank=0),
        spec(data__seq_len=48),
    ]
    summary = run_specs(specs, db)
    assert summary.statuses == ["ok", "failed", "failed", "failed", "failed", "ok"]
    frame = runs(db)
    errors = dict(zip(range(6), frame.error, strict=True))
    assert "rank 1: RuntimeError: injected failure on rank 1" in errors[1]
    assert errors[2].startswith(
        f"timed out after {hang_timeout_s} s (timeout_s); rank 0 was in inject_faults"
    )
    assert errors[3].startswith("rank 1: killed by SIGKILL")
    assert errors[4].startswith("rank 0:") and "allocate" in errors[4].lower()
    assert list(frame.failed_rank[[1, 2, 3, 4]]) == [1, 0, 1, 0]
    assert check_integrity(db) == []
    assert descendants() == []


def wait_for(what: str, proc: subprocess.Popen, check, timeout_s: float = 300) -> None:
    """Poll ``check()`` until true while the launcher lives; generous, as a busy machine may take
    minutes to start a rank (each imports torch)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if check():
                return
        except Exception:  # the launcher may hold the write lock for a moment
            pass
        time.sleep(0.5)
    raise AssertionError(f"{what}: not in {timeout_s:.0f} s")


def wait_for_hanging_run(db: Path, proc: subprocess.Popen, tmp: Path) -> None:
    """Until the first configuration is ok and the second (which hangs) has its rank started."""
    wait_for(
        "the first run ok and the second running",
        proc,
        lambda: db.exists() and list(runs(db).status) == ["ok", "running"] and orphans(tmp),
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_keeps_finished_runs_and_resume_finishes(tmp_path, sig):
    db = tmp_path / "r.duckdb"
    # the second configuration (seq 48) hangs on its first measured step
    suite = tmp_path / "s.toml"
    write_suite(suite, hang_second=True)
    proc = launch(suite, db, tmp=tmp_path)
    wait_for_hanging_run(db, proc, tmp_path)
    proc.send_signal(sig)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert list(runs(db).status) == ["ok", "interrupted"]
    assert check_integrity(db) == []
    assert orphans(tmp_path) == []  # the launcher waits for its ranks before it exits
    # --resume runs only what did not finish
    write_suite(suite, hang_second=False)
    proc = launch(suite, db, "--resume", tmp=tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "skipped" in err
    assert list(runs(db).status) == ["ok", "interrupted", "ok"]


def test_sigkill_of_launcher_leaves_a_readable_database_and_no_orphans(tmp_path):
    db = tmp_path / "r.duckdb"
    suite = tmp_path / "s.toml"
    write_suite(suite, hang_second=True)
    proc = launch(suite, db, tmp=tmp_path)
    wait_for_hanging_run(db, proc, tmp_path)
    proc.kill()  # SIGKILL to the launcher alone: its children must follow it
    proc.communicate(timeout=30)
    frame = runs(db)
    assert frame.status.iloc[0] == "ok"
    assert frame.status.iloc[1] != "ok"  # 'running': visibly not ok
    assert check_integrity(db) == []
    # the ranks see their launcher gone and end; on a busy machine that may take a while
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and orphans(tmp_path):
        time.sleep(0.5)
    assert orphans(tmp_path) == []


def orphans(tmp: Path) -> list[int]:
    """Worker processes whose working folder lies under ``tmp`` (the TMPDIR this test gave its
    launcher), so ranks of other processes on the machine are never counted."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "greenbench.rank.worker" in cmd and f"{tmp}{os.sep}greenbench-" in cmd:
            found.append(p.info["pid"])
    return found


def write_suite(path: Path, *, hang_second: bool) -> None:
    lines = ["[defaults]"]
    lines += [f'"{k}" = {v!r}'.replace("'", '"') for k, v in QUICK.items()]
    lines += ["[[entries]]", 'workload = "transformer-vs-mamba"', 'set = { "data.seq_len" = 32 }']
    second = '{ "data.seq_len" = 48' + (', "debug.hang_rank" = 0 }' if hang_second else " }")
    lines += ["[[entries]]", 'workload = "transformer-vs-mamba"', f"set = {second}"]
    path.write_text("\n".join(lines) + "\n")


def _as_a_background_job() -> None:
    # what `greenbench run ... &` in a script (and many CI runners) gives the launcher:
    # SIGINT inherited as ignored; greenbench must still stop on it
    signal.signal(signal.SIGINT, signal.SIG_IGN)


_LAUNCHED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_launcher_survives_its_test():
    yield
    while _LAUNCHED:
        proc = _LAUNCHED.pop()
        if proc.poll() is None:  # the test failed before it ended: do not leak into the next
            proc.kill()
            proc.communicate()


def launch(suite: Path, db: Path, *extra: str, tmp: Path | None = None) -> subprocess.Popen:
    """``greenbench run --suite SUITE`` as a background job; with ``tmp``, its working folders
    (and so its ranks' command lines) lie there."""
    env = {**os.environ, "TMPDIR": str(tmp)} if tmp is not None else None
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "greenbench.cli",
            "run",
            "--suite",
            str(suite),
            *extra,
            "--db",
            str(db),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_as_a_background_job,
        env=env,
    )
    _LAUNCHED.append(proc)
    return proc


def test_the_next_launcher_sweeps_a_killed_launchers_working_folder(tmp_path):

    from greenbench.launcher.execute import TEMP_PREFIX

    db = tmp_path / "r.duckdb"
    suite = tmp_path / "s.toml"
    write_suite(suite, hang_second=True)
    proc = launch(suite, db, tmp=tmp_path)
    wait_for_hanging_run(db, proc, tmp_path)  # the hanging configuration has its working folder
    left = list(tmp_path.glob(f"{TEMP_PREFIX}{proc.pid}-*"))
    assert left, "the running configuration has no working folder"
    proc.kill()
    proc.communicate(timeout=30)
    assert all(p.exists() for p in left)  # a SIGKILLed launcher cannot clean up
    write_suite(suite, hang_second=False)
    proc = launch(suite, db, "--resume", tmp=tmp_path)
    proc.communicate(timeout=300)
    assert not any(p.exists() for p in left)
