"""Collecting a job that ended: its shards merged, and what it owed and did not store kept as
failed or interrupted with the scheduler's reason, from the job's note of the run (the node it
died on) or, never begun, from its spec. The job's writes are the real ShardStore's; the
scheduler's verdict is given as a JobEnd (what `executors.job_end` makes of sacct's state)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import QUICK

from greenbench.cluster.collect import collect_job, run_statuses
from greenbench.cluster.executors import JobEnd
from greenbench.cluster.manifest import JobRecord, load_manifests, new_manifest
from greenbench.launcher.runners.record import spec_record
from greenbench.results import RunOutcome
from greenbench.spec import expand
from greenbench.store import Store, get_run, pending_shards, shard_dir
from greenbench.store.shard_writer import ShardStore, begun_note

RUN_IDS = ["aaaaaaaaaaa1", "aaaaaaaaaaa2", "aaaaaaaaaaa3"]


@pytest.fixture
def job(tmp_path: Path):
    """A manifest with one submitted job of three configurations, and the database."""
    db = tmp_path / "g.duckdb"
    specs = expand("transformer-vs-mamba", [QUICK | {"data.seq_len": [32, 48, 64]}], label="x")
    manifest = new_manifest("slurm", db)
    record = JobRecord(
        array="a", index=0, specs=[s.to_dict() for s in specs], run_ids=list(RUN_IDS),
        names=[s.name for s in specs], keys=[["k", "x"]] * 3, state="submitted", job_id="7",
    )  # fmt: skip
    manifest.jobs.append(record)
    manifest.save()
    return manifest, record, specs, Store(db)


def node_row(spec, run_id: str) -> dict:
    """The row a job's launcher begins a run with on its node."""
    return spec_record(spec, run_id).row() | {
        "device_type": "cpu:Node CPU", "kernels": "{}", "host": "node-17",
    }  # fmt: skip


def test_a_job_that_ended_well_has_its_runs_merged(job) -> None:
    manifest, record, specs, store = job
    writer = ShardStore(store.path)
    for spec, run_id in zip(specs, RUN_IDS, strict=True):
        writer.begin_run(node_row(spec, run_id))
        assert begun_note(store.path, run_id).exists()
        writer.finish_run(run_id, RunOutcome(status="ok"))
        assert not begun_note(store.path, run_id).exists()
    assert len(pending_shards(store.path)) == 3
    assert collect_job(manifest, record, JobEnd("COMPLETED", None, "job 7 COMPLETED"), store) == []
    assert run_statuses(store.path, RUN_IDS) == dict.fromkeys(RUN_IDS, "ok")
    assert pending_shards(store.path) == []
    (saved,), _ = load_manifests(store.path)
    assert saved.jobs[0].state == "collected" and saved.jobs[0].end_state == "COMPLETED"


def test_a_killed_job_leaves_its_runs_failed_with_the_schedulers_reason(job) -> None:
    manifest, record, specs, store = job
    writer = ShardStore(store.path)
    writer.begin_run(node_row(specs[0], RUN_IDS[0]))
    writer.finish_run(RUN_IDS[0], RunOutcome(status="ok"))
    writer.begin_run(node_row(specs[1], RUN_IDS[1]))  # then the job was killed; [2] never began
    end = JobEnd("OUT_OF_MEMORY", "failed", "job 7 OUT_OF_MEMORY without a result")
    assert collect_job(manifest, record, end, store) == []
    assert run_statuses(store.path, RUN_IDS) == {
        RUN_IDS[0]: "ok", RUN_IDS[1]: "failed", RUN_IDS[2]: "failed",
    }  # fmt: skip
    died = get_run(store.path, RUN_IDS[1])
    assert died["error"] == "job 7 OUT_OF_MEMORY without a result"
    assert died["host"] == "node-17" and died["device_type"] == "cpu:Node CPU"  # where it died
    never = get_run(store.path, RUN_IDS[2])
    assert never["error"] == (
        "job 7 OUT_OF_MEMORY without a result; the configuration had not started"
    )
    assert never["config_name"] == specs[2].name and never["host"] is None
    assert not any(shard_dir(store.path).iterdir())  # notes and shards all gone


def test_a_timed_out_job_leaves_its_runs_interrupted(job) -> None:
    manifest, record, _, store = job
    end = JobEnd("TIMEOUT", "interrupted", "job 7 TIMEOUT: Job not requeued because: timed-out")
    assert collect_job(manifest, record, end, store) == []
    assert set(run_statuses(store.path, RUN_IDS).values()) == {"interrupted"}


def test_a_job_that_ended_well_without_a_run_is_told_so(job) -> None:
    manifest, record, specs, store = job
    writer = ShardStore(store.path)
    for spec, run_id in zip(specs[:2], RUN_IDS[:2], strict=True):
        writer.begin_run(node_row(spec, run_id))
        writer.finish_run(run_id, RunOutcome(status="ok"))
    assert collect_job(manifest, record, JobEnd("COMPLETED", None, "job 7 COMPLETED"), store) == []
    missing = get_run(store.path, RUN_IDS[2])
    assert missing["status"] == "failed"
    assert missing["error"].endswith("yet it stored no result for this configuration")


def test_a_damaged_shard_stops_the_collection_and_is_left_untouched(job) -> None:
    manifest, record, specs, store = job
    writer = ShardStore(store.path)
    writer.begin_run(node_row(specs[0], RUN_IDS[0]))
    writer.finish_run(RUN_IDS[0], RunOutcome(status="ok"))
    (shard,) = pending_shards(store.path)
    with shard.open("r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    damaged = shard.read_bytes()
    end = JobEnd("FAILED", "failed", "job 7 FAILED")
    lines = collect_job(manifest, record, end, store)
    assert len(lines) == 1 and lines[0].startswith(f"left shard {shard}")
    assert shard.read_bytes() == damaged  # not replaced by a "failed" run of the same id
    assert run_statuses(store.path, RUN_IDS) == {}
    assert record.state == "submitted"  # collected again later, once the shard is dealt with
