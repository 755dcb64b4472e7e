"""Watching a submission's jobs: local jobs started in turn, ended jobs collected into the
database, a progress bar, one line per configuration as its job's runs arrive; and
`greenbench status`, the same look taken once (or until the end with ``--wait``) over every
submission a database has open.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from greenbench.cluster.collect import collect_job, run_statuses
from greenbench.cluster.executors import LIVE_STATES, job_end, job_states
from greenbench.cluster.manifest import JobRecord, Manifest, load_manifests
from greenbench.cluster.submit import submit_planned
from greenbench.launcher.progress import (
    CONTENTION_KEYS,
    finished_line,
    print_summary,
    progress_bar,
)
from greenbench.store import Store, read_frame
from greenbench.store.views import ok_repeats_sql

#: seconds between looks at local jobs (a SLURM submission uses the options' poll_s)
LOCAL_POLL_S = 0.5
NEVER_SUBMITTED = "never submitted"
_JOB_WORDS = {"planned": "not submitted", "submitted": "open", "collected": "over"}
_REPEAT_COLUMNS = [
    "tokens_per_s", "joules_per_token", "energy_source", "energy_measured", "mfu",
    "idle_power_w", "idle_note",
]  # fmt: skip


def look(
    manifest: Manifest,
    store: Store,
    *,
    start_local: bool,
    on_job: Callable[[JobRecord], None],
    on_note: Callable[[str], None],
    stuck: set[int],
) -> Counter[str]:
    """One look at every open job of ``manifest``: collect the jobs that ended (``on_job``
    each), start the next local job if none runs (``start_local``), and count the others by
    state. Jobs whose shards could not be merged go in ``stuck`` (``on_note`` says why)."""
    watched = [
        j.job_id
        for i, j in enumerate(manifest.jobs)
        if j.state == "submitted" and i not in stuck and j.job_id is not None
    ]
    states = job_states(manifest.executor, manifest.folder, watched)
    for i, job in enumerate(manifest.jobs):
        state = states.get(job.job_id or "")
        if state is None or state in LIVE_STATES:
            continue
        problems = collect_job(
            manifest, job, job_end(manifest.executor, manifest.folder, job.job_id, state), store
        )
        if problems:
            stuck.add(i)
            for line in problems:
                on_note(f"job {job.job_id}: {line}")
            continue
        on_job(job)
    starts = start_local and manifest.executor == "submitit-local"
    open_now = [i for i, j in enumerate(manifest.jobs) if j.state == "submitted" and i not in stuck]
    planned = [j for j in manifest.jobs if j.state == "planned"]
    if starts and not open_now and planned:  # the next local job, as soon as the last is over
        submit_planned(manifest, planned[:1])
        states[planned[0].job_id] = "RUNNING"
        open_now = [manifest.jobs.index(planned[0])]
    counts: Counter[str] = Counter()
    for job in manifest.jobs:
        if job.state == "planned":
            counts["waiting its turn" if starts else NEVER_SUBMITTED] += 1
    for i in open_now:
        counts[states.get(manifest.jobs[i].job_id, "UNKNOWN").lower()] += 1
    return counts


def wait_with_progress(manifest: Manifest, *, poll_s: float, console: Console) -> list[tuple]:
    """Watch ``manifest`` until every job is collected (or stuck), with a progress bar over
    its configurations; returns (name, status, error) per configuration, for the summary.
    Ctrl-C: SLURM jobs go on (`greenbench status` collects them later); a local job is
    stopped and stored interrupted."""
    store = Store(manifest.db, lock_timeout_s=60.0)
    rows: list[tuple] = []
    stuck: set[int] = set()
    total = sum(len(j.run_ids) for j in manifest.jobs)
    poll = LOCAL_POLL_S if manifest.executor == "submitit-local" else poll_s
    with progress_bar(console) as progress:
        task = progress.add_task("submitted", total=total)

        def on_job(job: JobRecord) -> None:
            for line, row in job_lines(Path(manifest.db), job):
                progress.console.print(line)
                rows.append(row)
            progress.advance(task, len(job.run_ids))

        def on_note(line: str) -> None:
            progress.console.print(f"[yellow]{escape(line)}[/yellow]")

        try:
            while True:
                counts = look(
                    manifest, store, start_local=True, on_job=on_job, on_note=on_note, stuck=stuck
                )
                if set(counts) <= {NEVER_SUBMITTED}:  # over, or nothing left that can move
                    break
                progress.update(task, description=describe(counts))
                time.sleep(poll)
        except KeyboardInterrupt:
            stop_local(manifest, store, on_job, on_note, stuck)
            console.print(
                f"[yellow]interrupted[/yellow]: {escape(left_running(manifest))}; results so far "
                f"are in {escape(manifest.db)}"
            )
            raise SystemExit(130) from None
    for i in sorted(stuck):
        rows += [(name, "not merged", "see the line above") for name in manifest.jobs[i].names]
    for job in manifest.jobs:
        if job.state == "planned":
            rows += [(name, "not submitted", "--resume submits it") for name in job.names]
    return rows


def stop_local(
    manifest: Manifest,
    store: Store,
    on_job: Callable[[JobRecord], None],
    on_note: Callable[[str], None],
    stuck: set[int],
    wait_s: float = 60.0,
) -> None:
    """After Ctrl-C: a local job still running is stopped (SIGINT to the job, which stores its
    run interrupted and ends) and, once over, collected; SLURM jobs are left to the scheduler.
    A second Ctrl-C, or a job not over in ``wait_s``, stops it as submitit cancels (its
    controller SIGKILLs it a second later); `greenbench status` collects it then."""
    if manifest.executor != "submitit-local":
        return
    from greenbench.cluster.executors import cancel_local

    def cancel(*, hard: bool) -> None:
        for job in manifest.jobs:
            if job.state == "submitted" and job.job_id:
                cancel_local(job.job_id, hard=hard)

    cancel(hard=False)
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            counts = look(
                manifest, store, start_local=False, on_job=on_job, on_note=on_note, stuck=stuck
            )
            if set(counts) <= {NEVER_SUBMITTED}:
                return
            time.sleep(LOCAL_POLL_S)
    except KeyboardInterrupt:
        pass
    cancel(hard=True)


def left_running(manifest: Manifest) -> str:
    open_jobs = [j for j in manifest.jobs if j.state == "submitted"]
    if manifest.executor == "submitit-local" or not open_jobs:
        planned = sum(len(j.run_ids) for j in manifest.jobs if j.state == "planned")
        return f"{planned} configuration(s) not run (--resume runs them)"
    return (
        f"{len(open_jobs)} job(s) go on running on the cluster; `greenbench status --db "
        f"{manifest.db}` collects them"
    )


def describe(counts: Counter[str]) -> str:
    """The jobs not over yet, by state: e.g. ``jobs: 2 running, 6 pending``."""
    return "jobs: " + ", ".join(f"{n} {state}" for state, n in counts.most_common())


def job_lines(db: Path, job: JobRecord) -> list[tuple[str, tuple]]:
    """(line, (name, status, error)) per configuration of a collected job, from the database."""
    from greenbench.store import list_runs

    frame = list_runs(db, limit=None, run_id=list(job.run_ids))
    rows = {r.run_id: r for r in frame.itertuples()}
    out = []
    for run_id, name in zip(job.run_ids, job.names, strict=True):
        row = rows.get(run_id)
        status = row.status if row is not None else "missing"
        error = row.error if row is not None and isinstance(row.error, str) else None
        repeats = stored_repeats(db, run_id) if status == "ok" else []
        seen = (
            {k: _known(getattr(row, k, None)) for k in CONTENTION_KEYS} if row is not None else {}
        )
        line = finished_line(status, run_id, name, repeats, error, **seen)
        out.append((line, (name, status, error)))
    return out


def stored_repeats(db: Path, run_id: str) -> list[SimpleNamespace]:
    """The run's stored repeats, as `launcher.progress.finished_line` reads them."""
    frame = read_frame(db, ok_repeats_sql(_REPEAT_COLUMNS, "run"), [run_id])
    return [
        SimpleNamespace(**{k: _known(v) for k, v in row.items()})
        for row in frame.to_dict("records")
    ]


def _known(value: object) -> object:
    """A stored value, None where it is NULL (NaN, NA)."""
    try:
        return None if value is None or bool(value != value) else value
    except (TypeError, ValueError):  # pandas' NA
        return None


def status(db_path: Path, *, wait: bool, poll_s: float, console: Console) -> int:
    """`greenbench status`: collect what ended in every submission of ``db_path`` (until the
    end with ``wait``) and print one line per submission; the number of open jobs is
    returned (0: nothing left to wait for)."""
    manifests, problems = load_manifests(db_path)
    for line in problems:
        console.print(f"[yellow]{escape(line)}[/yellow]")
    if not manifests:
        console.print(f"no cluster submissions for {escape(str(db_path))}")
        return 0
    store: Store | None = None
    open_jobs = 0
    for manifest in manifests:
        if manifest.open_jobs and manifest.executor == "slurm" and wait:
            rows = wait_with_progress(manifest, poll_s=poll_s, console=console)
            print_summary(console, rows, Path(manifest.db))
        elif manifest.open_jobs:
            store = store or Store(db_path, lock_timeout_s=60.0)
            stuck: set[int] = set()

            def on_job(job: JobRecord) -> None:
                for line, _ in job_lines(Path(manifest.db), job):  # noqa: B023 - used at once
                    console.print(line)

            look(
                manifest,
                store,
                start_local=False,
                on_job=on_job,
                on_note=lambda line: console.print(f"[yellow]{escape(line)}[/yellow]"),
                stuck=stuck,
            )
        open_jobs += sum(j.state == "submitted" for j in manifest.jobs)
    console.print(submissions_table(db_path, manifests))
    return open_jobs


def submissions_table(db_path: Path, manifests: list[Manifest]) -> Table:
    """One row per submission: its executor, its jobs by state, its configurations by status."""
    table = Table(title=f"cluster submissions of {escape(str(db_path))}")
    for column in ("submission", "executor", "jobs", "configurations"):
        table.add_column(column)
    every = [r for m in manifests for j in m.jobs for r in j.run_ids]
    stored = run_statuses(Path(db_path), every)
    for m in manifests:
        jobs = Counter(
            "not submitted"
            if j.state == "planned"
            else "open"
            if j.state == "submitted"
            else "over"
            for j in m.jobs
        )
        runs = Counter(stored.get(r, "not stored") for j in m.jobs for r in j.run_ids)
        table.add_row(
            m.submission_id,
            m.executor,
            ", ".join(f"{n} {s}" for s, n in sorted(jobs.items())),
            ", ".join(f"{n} {s}" for s, n in sorted(runs.items())),
        )
    return table
