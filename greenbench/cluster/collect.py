"""Bringing an ended job's runs into the database: its shards merged, and every configuration
it owed and did not store kept as failed or interrupted with the scheduler's reason.

The submitter is the database's one writer. When the scheduler says a job is over, its shards
(and only its: a requeued job elsewhere may still be writing) are merged; a configuration of
the job with no final run in the database then is stored from the job's note of it (the node
that began it) or, never begun, from its spec, with the status the job's end means
(`executors.JobEnd`) and the scheduler's words. A shard that cannot be merged (damaged, newer)
stops the job's collection with its line, so that nothing replaces it; `greenbench merge`
reports it again.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from greenbench.cluster.executors import JobEnd
from greenbench.cluster.manifest import JobRecord, Manifest
from greenbench.launcher.runners.record import spec_record
from greenbench.settings.runspec import RunSpec
from greenbench.store import Store, list_runs, merge_pending
from greenbench.store.shard_writer import read_begun, store_unfinished
from greenbench.store.writer import FINAL_STATUSES


def collect_job(manifest: Manifest, job: JobRecord, end: JobEnd, store: Store) -> list[str]:
    """Merge ``job``'s runs into the database and mark it collected (saved); returns lines for
    the user about shards left behind (then the job stays open, to be collected again)."""
    db = Path(manifest.db)
    report = merge_pending(store, timeout_s=store.lock_timeout_s, only=job.run_ids)
    if report.left:
        return [line for line in report.lines() if line.startswith("left")]
    stored = run_statuses(db, job.run_ids)
    owed = []
    for spec_dict, run_id in zip(job.specs, job.run_ids, strict=True):
        if stored.get(run_id) in FINAL_STATUSES:
            continue
        row = read_begun(db, run_id)
        reason = end.reason
        if row is None:
            never = "unknown (the configuration never started)"
            record = spec_record(RunSpec.from_dict(spec_dict), run_id)
            row = replace(record, device_type=never, kernels={}).row()
            reason += "; the configuration had not started"
        status = end.status or "failed"
        if end.status is None:
            reason += ", yet it stored no result for this configuration"
        store_unfinished(db, row, status, reason)
        owed.append(run_id)
    if owed:
        report = merge_pending(store, timeout_s=store.lock_timeout_s, only=owed)
        if report.left:
            return [line for line in report.lines() if line.startswith("left")]
    job.state, job.end_state, job.reason = "collected", end.state, end.reason
    manifest.save()
    return []


def run_statuses(db_path: Path, run_ids: list[str]) -> dict[str, str]:
    """The stored status of each of ``run_ids`` the database has."""
    if not run_ids or not db_path.exists():
        return {}
    frame = list_runs(db_path, limit=None, run_id=list(run_ids))
    return dict(zip(frame["run_id"], frame["status"], strict=True))
