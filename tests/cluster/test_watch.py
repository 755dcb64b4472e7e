"""The watcher's loop: local jobs one at a time, a job whose shards cannot be merged set aside
(the next one still starts), and waiting ends when nothing left can move. The scheduler and
the collection are replaced by stand-ins here; they are tested for real in test_local_jobs,
test_slurm_faked and test_collect."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from greenbench.cluster import executors, watch
from greenbench.cluster.executors import JobEnd
from greenbench.cluster.manifest import JobRecord, Manifest, new_manifest


def test_local_jobs_start_one_at_a_time_and_a_stuck_one_does_not_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = new_manifest("submitit-local", tmp_path / "g.duckdb")
    manifest.jobs = [
        JobRecord(
            array="a", index=i, specs=[{}], run_ids=[f"r{i}"], names=[f"c{i}"], keys=[["k", None]]
        )
        for i in range(3)
    ]
    started: list[str] = []
    states: dict[str, str] = {}

    def submit(m, jobs):
        for job in jobs:
            job.job_id, job.state = f"j{job.index}", "submitted"
            started.append(job.job_id)
            states[job.job_id] = "RUNNING"

    def collect(m, job, end, store):
        if job.index == 0:
            return ["left shard r0.duckdb in place: damaged"]
        job.state = "collected"
        return []

    monkeypatch.setattr(watch, "submit_planned", submit)
    monkeypatch.setattr(watch, "job_states", lambda ex, folder, ids: {i: states[i] for i in ids})
    monkeypatch.setattr(watch, "job_end", lambda ex, folder, jid, st: JobEnd(st, None, "ok"))
    monkeypatch.setattr(watch, "collect_job", collect)
    notes: list[str] = []
    stuck: set[int] = set()

    def look() -> dict:
        return dict(watch.look(manifest, None, start_local=True, on_job=lambda j: None,
                               on_note=notes.append, stuck=stuck))  # fmt: skip

    assert look() == {"waiting its turn": 2, "running": 1} and started == ["j0"]
    assert look() == {"waiting its turn": 2, "running": 1}  # one at a time
    states["j0"] = "FINISHED"  # its shard will not merge: set aside, and the next one starts
    assert look() == {"waiting its turn": 1, "running": 1} and started == ["j0", "j1"]
    assert stuck == {0} and notes == ["job j0: left shard r0.duckdb in place: damaged"]
    states["j1"] = "FINISHED"
    assert look() == {"running": 1} and started == ["j0", "j1", "j2"]
    states["j2"] = "FINISHED"
    assert look() == {}
    assert [j.state for j in manifest.jobs] == ["submitted", "collected", "collected"]


def one_running_local_job(tmp_path: Path) -> Manifest:
    manifest = new_manifest("submitit-local", tmp_path / "g.duckdb")
    job = JobRecord(
        array="a", index=0, specs=[{}], run_ids=["r0"], names=["c0"], keys=[["k", None]]
    )
    job.job_id, job.state = "j0", "submitted"
    manifest.jobs = [job]
    return manifest


def record_cancels(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """The calls ``stop_local`` makes to ``cancel_local``: (job id, hard)."""
    cancels: list[tuple[str, bool]] = []

    def cancel_local(job_id: str, *, hard: bool = False) -> None:
        cancels.append((job_id, hard))

    monkeypatch.setattr(executors, "cancel_local", cancel_local)
    return cancels


def stop(
    manifest: Manifest,
    monkeypatch: pytest.MonkeyPatch,
    looks: list,
    wait_s: float = 60.0,
    sleep: Callable[[float], None] = lambda s: None,
) -> list[tuple[str, bool]]:
    """``stop_local`` with ``looks`` as what each look does (the jobs it counts, or an
    exception it raises) and ``sleep`` as the pause between looks; the calls to
    ``cancel_local`` it made."""
    cancels = record_cancels(monkeypatch)

    def look(*args: object, **kwargs: object) -> dict:
        what = looks.pop(0)
        if isinstance(what, BaseException):
            raise what
        return what

    monkeypatch.setattr(watch, "look", look)
    monkeypatch.setattr(watch.time, "sleep", sleep)
    try:
        watch.stop_local(manifest, None, lambda j: None, print, set(), wait_s=wait_s)
    except KeyboardInterrupt:
        pytest.fail("a second Ctrl-C escaped stop_local (a traceback)")
    return cancels


def test_a_stopped_local_job_is_asked_to_stop_itself_and_given_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks = [{"running": 1}, {"running": 1}, {}]
    assert stop(one_running_local_job(tmp_path), monkeypatch, looks) == [("j0", False)]
    assert looks == []  # looked until the job was over, and no harder stop


def test_a_second_ctrl_c_while_stopping_stops_the_job_at_once_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks = [{"running": 1}, KeyboardInterrupt()]
    cancels = stop(one_running_local_job(tmp_path), monkeypatch, looks)
    assert cancels == [("j0", False), ("j0", True)]


def test_a_second_ctrl_c_in_the_pause_between_looks_is_taken_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def ctrl_c(seconds: float) -> None:
        raise KeyboardInterrupt

    looks = [{"running": 1}]
    cancels = stop(one_running_local_job(tmp_path), monkeypatch, looks, sleep=ctrl_c)
    assert cancels == [("j0", False), ("j0", True)]


def test_a_local_job_not_over_in_time_is_stopped_as_submitit_cancels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cancels = stop(one_running_local_job(tmp_path), monkeypatch, [{"running": 1}] * 3, wait_s=0.0)
    assert cancels == [("j0", False), ("j0", True)]


def test_a_collected_job_s_line_is_the_stored_median_with_its_trust(tmp_path: Path) -> None:
    """The line a collected configuration gets is the one `greenbench run` prints: the medians
    stored for it (not one repeat) and its trust markers, read back from the database."""
    from dataclasses import replace

    from greenbench.results import RepeatResult, RunOutcome
    from greenbench.store import Store

    db = tmp_path / "g.duckdb"
    row = {
        "run_id": "aaaaaaaaaaaa", "workload": "w", "config_name": "c0", "config": {},
        "model_family": "transformer", "model_size": "tiny", "strategy": "single",
        "layout": "dp1", "device": "cpu", "device_type": "cpu:test", "nproc": 1, "nnodes": 1,
        "precision": "fp32", "seq_len": 64, "lengths": "fixed",
    }  # fmt: skip
    one = RepeatResult(
        repeat=0, tokens=790, seconds=10.0, tokens_per_s=79.0, energy_source="estimate",
        energy_measured=False, energy_j=280.45, energy_net_j=None, energy_gpu_j=None,
        energy_cpu_j=None, energy_dram_j=None, idle_power_w=None, joules_per_token=0.355,
        net_joules_per_token=None, flops=1e9, mfu=0.05, peak_mem_bytes=1, step_time_p50_s=0.5,
        step_time_p95_s=0.6, wait_fraction=0.0, wait_energy_j=None, co2_g=None, loss=1.0,
    )  # fmt: skip
    repeats = [one, replace(one, repeat=1, tokens_per_s=58.0, joules_per_token=0.5501)]
    with Store(db) as store:
        store.begin_run(row)
        store.finish_run(
            "aaaaaaaaaaaa", RunOutcome("ok", repeats, contended=True, others_busy_cores=0.7)
        )
    job = JobRecord(array="a", index=0, specs=[{}], run_ids=["aaaaaaaaaaaa"], names=["c0"],
                    keys=[["k", None]])  # fmt: skip
    ((line, (name, status, _)),) = watch.job_lines(db, job)
    text = " ".join(line.split())
    assert (name, status) == ("c0", "ok")
    assert "0.453 J/token" in text and "79 tok/s" not in text
    assert "⚠ contended" in text and "min–max of 2" in text
