"""The job's own bookkeeping: its rendezvous port, and what a preempted job is requeued with
(the configurations whose run is not yet in a shard)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from greenbench.cluster.job import RunJob, remaining, rendezvous_port
from greenbench.store import shard_dir


def test_the_rendezvous_port_is_fixed_by_the_job_id() -> None:
    ports = {rendezvous_port(f"4242_{i}-2") for i in range(50)}
    assert all(20000 <= p < 30000 for p in ports) and len(ports) > 40
    assert rendezvous_port("4242_7-2") == rendezvous_port("4242_7-2")


def test_a_preempted_job_is_requeued_with_what_is_not_in_a_shard(tmp_path: Path) -> None:
    submitit = pytest.importorskip("submitit")
    db = tmp_path / "g.duckdb"
    payload = {"db": str(db), "specs": [{"n": 1}, {"n": 2}, {"n": 3}],
               "run_ids": ["r1", "r2", "r3"], "force": True}  # fmt: skip
    shard_dir(db).mkdir()
    (shard_dir(db) / "r2.duckdb").write_bytes(b"stored")
    left = remaining(payload)
    assert left["run_ids"] == ["r1", "r3"] and left["specs"] == [{"n": 1}, {"n": 3}]
    assert left["force"] is True and left["db"] == str(db)
    again = RunJob().checkpoint(payload)
    assert isinstance(again, submitit.helpers.DelayedSubmission)
    assert again.args == (left,) and isinstance(again.function, RunJob)


def test_a_job_at_its_time_limit_is_not_requeued(tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    job = RunJob()
    payload = {"db": str(tmp_path / "g.duckdb"), "specs": [{}], "run_ids": ["r1"],
               "time_min": 60}  # fmt: skip
    job.started = time.monotonic() - 50 * 60  # 50 of 60 minutes used: past submitit's 80 %
    assert job.checkpoint(payload) is None
    job.started = time.monotonic() - 5 * 60  # preempted early: requeued
    assert job.checkpoint(payload) is not None
