"""The watcher's loop: local jobs one at a time, a job whose shards cannot be merged set aside
(the next one still starts), and waiting ends when nothing left can move. The scheduler and
the collection are replaced by stand-ins here; they are tested for real in test_local_jobs,
test_slurm_faked and test_collect."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenbench.cluster import watch
from greenbench.cluster.executors import JobEnd
from greenbench.cluster.manifest import JobRecord, new_manifest


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
