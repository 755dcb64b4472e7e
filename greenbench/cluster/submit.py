"""Submitting a suite's configurations as cluster jobs (`greenbench run --executor slurm`).

Everything that can refuse does so before anything is written: the cluster options, the plan
(a local executor refuses configurations spanning nodes), submitit and sbatch, the database
(read whole, created if new). Then the submission's manifest is written, and the jobs are
submitted: every SLURM array at once (the scheduler decides what runs when), local jobs one at
a time as the watcher (`cluster.watch`) finds the last one over.

With ``resume``, a configuration is left out when a run of it is stored ok (as submitted to an
earlier job, or run here with the same settings) or a live job of an earlier submission holds
it; the rest, failed, interrupted or never run, are submitted again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from greenbench.cluster.collect import run_statuses
from greenbench.cluster.executors import (
    LIVE_STATES,
    SubmissionRefused,
    job_states,
    require_scheduler,
    submit_jobs,
)
from greenbench.cluster.job_arrays import JobShape, Plan, plan_jobs
from greenbench.cluster.manifest import JobRecord, Manifest, load_manifests, new_manifest
from greenbench.cluster.options import ClusterOptions
from greenbench.cluster.sbatch import slurm_parameters
from greenbench.errors import DoesNotFit, SpecError, StoreError
from greenbench.settings import spec_key
from greenbench.settings.runspec import RunSpec
from greenbench.store import Store

#: (config key as submitted, label): how a configuration is named across submissions
Key = tuple[str, str | None]


def submitted_key(spec: RunSpec) -> Key:
    return (spec_key(spec), spec.label)


def submit(
    specs: list[RunSpec],
    db_path: Path,
    *,
    executor: str,
    options: ClusterOptions,
    python_path: list[str],
    force: bool = False,
    devices: int | None = None,
    resume: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> Manifest | None:
    """Plan and submit ``specs`` (see the module's text); None when resume leaves nothing."""
    if executor not in ("slurm", "submitit-local"):
        raise SpecError(f"unknown cluster executor {executor!r}")
    local = executor == "submitit-local"
    plan = plan_jobs(specs, options, one_node=local)  # refuses what cannot be submitted, early
    if not plan.arrays:
        raise DoesNotFit(nothing_fits(plan.left_out))
    require_scheduler(executor)
    check_database(db_path)  # sound (or creatable) before any job is paid for
    if resume:
        specs = not_yet_done(db_path, specs, say)
        plan = plan_jobs(specs, options, one_node=local)
        if not plan.arrays:
            store_left_out(db_path, plan, say)
            say("every configuration is stored ok or held by a live job: nothing to submit")
            return None
    arrays = plan.arrays
    manifest = new_manifest(
        executor, db_path, python_path=list(python_path), force=force, devices=devices
    )
    for array in arrays:
        manifest.arrays[array.name] = {
            "shape": asdict(array.shape),
            "slurm": {} if local else slurm_parameters(array, options),
        }
        manifest.jobs += [
            JobRecord(
                array=array.name,
                index=i,
                specs=[s.to_dict() for s in job.specs],
                run_ids=list(job.run_ids),
                names=[s.name for s in job.specs],
                keys=[list(submitted_key(s)) for s in job.specs],
            )
            for i, job in enumerate(array.jobs)
        ]
    manifest.save()
    if not local:  # the scheduler decides what runs when; local jobs wait their turn
        try:
            for array in arrays:
                submit_planned(manifest, [j for j in manifest.jobs if j.array == array.name])
        except SubmissionRefused as exc:
            if all(job.state == "planned" for job in manifest.jobs):
                shutil.rmtree(manifest.folder, ignore_errors=True)  # nothing was submitted
                with contextlib.suppress(OSError):  # nor before: the records' folder goes too
                    manifest.folder.parent.rmdir()
                raise
            raise SubmissionRefused(
                f"{exc}; the arrays submitted before it go on (`greenbench status`), and "
                "`--resume` submits the rest"
            ) from None
    store_left_out(db_path, plan, say)
    return manifest


def check_database(db_path: Path) -> None:
    """An existing database is read whole and checked (a damaged or foreign file is refused);
    a new one must be creatable. Nothing is written: a refused submission leaves no file."""
    if db_path.exists():
        Store(db_path, verify=True)
        return
    parent = db_path.absolute().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(
            f"cannot create results database {db_path}: {parent} is not a writable directory "
            "(every node must be able to write its shards beside the database)"
        )


def store_left_out(db_path: Path, plan: Plan, say: Callable[[str], None]) -> None:
    """Store the configurations the request cannot hold as skipped, with why."""
    if not plan.left_out:
        return
    store = Store(db_path)
    for spec, why in plan.left_out:
        store_skipped(store, spec, f"does not fit the cluster request: {why}")
        say(f"skipped {spec.name}: {why}")


def submit_planned(manifest: Manifest, jobs: list[JobRecord]) -> None:
    """Submit ``jobs`` (planned, of one array) as one submission and record their ids."""
    array = manifest.arrays[jobs[0].array]
    ids = submit_jobs(
        manifest.executor,
        manifest.folder,
        JobShape(**array["shape"]),
        array["slurm"],
        [payload(manifest, job) for job in jobs],
    )
    for job, job_id in zip(jobs, ids, strict=True):
        job.job_id, job.state = job_id, "submitted"
    manifest.save()


def nothing_fits(left_out: list[tuple[RunSpec, str]]) -> str:
    """One line for a request none of the configurations fits."""
    reasons = sorted({why for _, why in left_out})
    return (
        f"none of the {len(left_out)} configurations fits the request: {'; '.join(reasons[:3])}"
        " (ask for more nodes or GPUs per node, or leave --nodes/--gpus-per-node out)"
    )


def store_skipped(store: Store, spec: RunSpec, reason: str) -> None:
    """Store a configuration left out of the jobs as skipped, with why."""
    from greenbench.launcher.runners.record import spec_record
    from greenbench.store import new_run_id

    run_id = new_run_id()
    record = spec_record(spec, run_id)
    store.begin_run(replace(record, device_type="unknown (not submitted)", kernels={}).row())
    store.mark_run(run_id, "skipped", reason)


def payload(manifest: Manifest, job: JobRecord) -> dict[str, Any]:
    """What `cluster.job.RunJob` gets: the database, the job's configurations and run ids."""
    return {
        "db": manifest.db,
        "specs": job.specs,
        "run_ids": job.run_ids,
        "python_path": manifest.python_path,
        "force": manifest.force,
        "devices": manifest.devices,
        "time_min": manifest.arrays[job.array]["shape"]["time_min"],
    }


def not_yet_done(db_path: Path, specs: list[RunSpec], say: Callable[[str], None]) -> list[RunSpec]:
    """``specs`` without those stored ok or held by a live job (each left out said once)."""
    from greenbench.launcher.launch import finished_configs

    manifests, problems = load_manifests(db_path)
    for line in problems:
        say(line)
    records = [(m, j) for m in manifests for j in m.jobs]
    statuses = run_statuses(db_path, [r for _, j in records for r in j.run_ids])
    done: set[Key] = set(finished_configs(db_path))
    live: dict[Key, str] = {}
    for m in manifests:  # one look at the scheduler per submission
        open_ids = [j.job_id for j in m.jobs if j.state == "submitted" and j.job_id]
        states = job_states(m.executor, m.folder, open_ids)
        for job in m.jobs:
            for run_id, key in zip(job.run_ids, job.keys, strict=True):
                if statuses.get(run_id) == "ok":
                    done.add((key[0], key[1]))
            state = states.get(job.job_id or "")
            if state in LIVE_STATES:
                live.update({(k[0], k[1]): f"job {job.job_id} ({state})" for k in job.keys})
    kept = []
    for spec in specs:
        key = submitted_key(spec)
        if key in done:
            say(f"skipped {spec.name}: already stored ok")
        elif key in live:
            say(f"skipped {spec.name}: {live[key]} still holds it")
        else:
            kept.append(spec)
    return kept
