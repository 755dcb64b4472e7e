"""How a failed configuration's cause is read from what its ranks left behind."""

from __future__ import annotations

import json
from pathlib import Path

from greenbench.launcher.execute import failed_rank_of, first_error

TORCHRUN_SUMMARY = """\
Failures:
[1]:
  time      : 2026-11-22_09:00:01
  host      : box
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 101)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 101
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_09:00:00
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 102)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 102
"""


def write_error(out: Path, rank: int, error: str, t: float) -> None:
    (out / f"error-rank{rank}.json").write_text(
        json.dumps({"rank": rank, "error": error, "time": t})
    )


def test_a_rank_killed_by_a_signal_is_the_cause_not_its_peers_broken_connection(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text("...\n" + TORCHRUN_SUMMARY)
    write_error(tmp_path, 0, "RuntimeError: Connection closed by peer", 1.0)
    message = first_error(tmp_path, 1, log)
    assert message.startswith("rank 1: killed by SIGKILL")
    assert "out of memory?" in message
    assert failed_rank_of(message) == 1


def test_the_earliest_rank_report_wins_when_no_rank_was_killed(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text("")
    write_error(tmp_path, 1, "ValueError: late", 2.0)
    write_error(tmp_path, 0, "RuntimeError: first", 1.0)
    assert first_error(tmp_path, 1, log) == "rank 0: RuntimeError: first"


def test_a_killed_single_rank_worker_and_an_unexplained_exit(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text("line one\nline two\n")
    assert first_error(tmp_path, -9, log).startswith("rank 0: killed by SIGKILL")
    assert first_error(tmp_path, 7, log) == "worker exited with code 7: line one | line two"
    assert failed_rank_of("worker exited with code 7") is None


def test_an_aborted_rank_carries_its_native_error_line(tmp_path):
    log = tmp_path / "worker.log"
    summary = TORCHRUN_SUMMARY.replace("exitcode  : -9", "exitcode  : -6")
    log.write_text(
        "terminate called after throwing an instance of 'gloo::IoException'\n"
        "  what():  [gloo/transport/tcp/pair.cc:598] Connection closed by peer\n" + summary
    )
    message = first_error(tmp_path, 1, log)
    assert message.startswith("rank 1: killed by SIGABRT: what():")
    assert "Connection closed by peer" in message


def test_the_native_reason_is_the_ranks_own_line_not_torchruns_report(tmp_path):
    # torchrun's "ChildFailedError:" comes after the rank's own line in the combined log; the
    # rank's per-rank file (torchrun --log-dir) holds only what the rank printed
    (tmp_path / "spec.json").write_text(json.dumps({"settings": {"nproc": 2}}))
    rank_dir = tmp_path / "ranks" / "job_x" / "attempt_0" / "1"
    rank_dir.mkdir(parents=True)
    (rank_dir / "stderr.log").write_text("terminate called without an active exception\n")
    (rank_dir / "stdout.log").write_text("")
    log = tmp_path / "worker.log"
    summary = TORCHRUN_SUMMARY.replace("exitcode  : -9", "exitcode  : -6")
    log.write_text(
        "[rank1]: terminate called without an active exception\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + summary
    )
    message = first_error(tmp_path, 1, log)
    assert message == "rank 1: killed by SIGABRT: terminate called without an active exception"
    # without per-rank files the combined log is read, and torchrun's own line is skipped
    (rank_dir / "stderr.log").unlink()
    assert first_error(tmp_path, 1, log) == message


def test_working_folders_of_dead_launchers_are_swept(tmp_path):
    import os

    from greenbench.launcher.execute import sweep_stale_temp

    dead_pid = 2**22 + 12345  # above Linux's default pid_max: no such process
    dead = tmp_path / f"greenbench-{dead_pid}-abc"
    live = tmp_path / f"greenbench-{os.getpid()}-def"
    other = tmp_path / "greenbench-notapid"
    for folder in (dead, live, other):
        (folder / "ranks").mkdir(parents=True)
    assert sweep_stale_temp(tmp_path) == [dead]
    assert not dead.exists() and live.exists() and other.exists()


def test_a_stop_swallowed_while_a_rank_started_still_stops_it(tmp_path, monkeypatch):
    # Python drops a KeyboardInterrupt raised inside its at-fork hooks ("Exception ignored"), as
    # happens when SIGTERM lands while a child is forked with preexec_fn: here the handler runs
    # as the child is started and its exception goes nowhere. The handler remembers the stop,
    # and the launcher raises it as soon as the child exists, stopping it.
    import signal
    import subprocess
    import time

    import psutil
    import pytest
    from helpers import QUICK

    from greenbench import processes
    from greenbench.launcher import execute as execute_module
    from greenbench.spec import expand

    monkeypatch.setattr(processes, "_stop_signal", None)
    real_popen = subprocess.Popen

    def popen_hit_by_a_stop(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        try:
            processes.stop_handler(signal.SIGTERM, None)
        except KeyboardInterrupt:
            pass  # swallowed, as in an at-fork hook
        return proc

    monkeypatch.setattr(execute_module.subprocess, "Popen", popen_hit_by_a_stop)
    spec = expand("transformer-vs-mamba", [{**QUICK, "timeout_s": 600.0}])[0]
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        execute_module.execute(spec)
    assert time.monotonic() - start < 60  # stopped at once, not after a whole run
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert all(p.status() == psutil.STATUS_ZOMBIE for p in left if p.is_running()), left
    monkeypatch.undo()
    processes.forget_stops()


def test_a_stop_acted_on_earlier_does_not_stop_the_next_rank(monkeypatch):
    import signal

    import pytest

    from greenbench import processes

    monkeypatch.setattr(processes, "_stop_signal", None)
    with pytest.raises(KeyboardInterrupt):
        processes.stop_handler(signal.SIGINT, None)  # raised, and handled by whoever caught it
    processes.forget_stops()  # as execute does before starting a rank
    processes.raise_if_stopped()  # nothing: the earlier stop was acted on
