"""The plan `greenbench run --executor slurm --dry-run` prints after the sbatch parameters: every
configuration, the job that would run it or why it is left out, and an estimated time where
the cluster has run it before.

The configurations run on the cluster's nodes, not on this machine, so this machine's runs say
nothing of their time: a configuration's estimate is the median wall time (started → finished)
of the latest `greenbench.launcher.durations.LATEST` runs of it that earlier submissions of
this database stored ok (their records name each configuration as submitted,
`greenbench.cluster.submit.submitted_key`), else unknown; ``--time-min`` is a limit, not an
estimate. With ``--resume``, a configuration stored ok (run here, or by an earlier job) is
marked as the submission would leave it out; whether a live job still holds one is the
scheduler's to say, and only a real submission asks it. Only files are read: the database
read-only (if it exists) and the submission records.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from greenbench.cluster.job_arrays import plan_jobs
from greenbench.cluster.manifest import load_manifests
from greenbench.cluster.options import ClusterOptions
from greenbench.cluster.submit import Key, submitted_key
from greenbench.launcher.durations import LATEST, clock
from greenbench.settings.runspec import RunSpec


def earlier_walls(db_path: Path) -> tuple[dict[Key, list[float]], set[Key]]:
    """(wall seconds of the ok runs of each configuration as submitted, newest first; the
    configurations stored ok) from this database's submission records and runs."""
    from greenbench.launcher.launch import finished_configs
    from greenbench.store import list_runs

    done: set[Key] = set(finished_configs(db_path))
    manifests, _ = load_manifests(db_path)
    owner = {run_id: (key[0], key[1]) for m in manifests for j in m.jobs
             for run_id, key in zip(j.run_ids, j.keys, strict=True)}  # fmt: skip
    walls: dict[Key, list[tuple[object, float]]] = {}
    if owner and db_path.exists():
        frame = list_runs(db_path, limit=None, run_id=list(owner), status="ok")
        for row in frame.itertuples():
            key = owner[row.run_id]
            done.add(key)
            if row.finished_at is not None and row.finished_at == row.finished_at:
                seconds = (row.finished_at - row.started_at).total_seconds()
                walls.setdefault(key, []).append((row.started_at, seconds))
    newest = {
        k: [s for _, s in sorted(v, key=lambda t: t[0], reverse=True)] for k, v in walls.items()
    }
    return newest, done


def cluster_plan_table(
    specs: list[RunSpec], db_path: Path, options: ClusterOptions, *, resume: bool = False
) -> tuple[Table, float, int]:
    """The plan's table, the summed estimates and how many that run have none."""
    from greenbench.reporting.terminal import cell

    plan = plan_jobs(specs, options)
    where: dict[int, str] = {}
    for array in plan.arrays:
        for index, job in enumerate(array.jobs):
            for spec in job.specs:
                where[id(spec)] = f"{array.name}[{index}]"
    left = {id(spec): why for spec, why in plan.left_out}
    walls, done = earlier_walls(db_path)
    table = Table("#", "configuration", "job", "estimate", "from / why", title_justify="left")
    table.title = f"plan: {len(specs)} configuration(s) on the cluster"
    total, unknown = 0.0, 0
    for i, spec in enumerate(specs, 1):
        key = submitted_key(spec)
        if id(spec) in left:
            table.add_row(str(i), cell(spec.name), "left out", "—", cell(left[id(spec)]))
            continue
        if resume and key in done:
            why = "already stored ok (--resume leaves it out)"
            table.add_row(str(i), cell(spec.name), "skipped", "—", why)
            continue
        latest = walls.get(key, [])[:LATEST]
        if latest:
            seconds = statistics.median(latest)
            total += seconds
            how = f"from {len(latest)} earlier cluster run{'s' if len(latest) > 1 else ''}"
            table.add_row(
                str(i), cell(spec.name), escape(where[id(spec)]), f"~{clock(seconds)}", how
            )
        else:
            unknown += 1
            table.add_row(str(i), cell(spec.name), escape(where[id(spec)]), "—",
                          "unknown: not run on the cluster before")  # fmt: skip
    return table, total, unknown


def print_cluster_plan(
    specs: list[RunSpec], db_path: Path, options: ClusterOptions, *, resume: bool = False
) -> None:
    """Print the plan (module docstring) on stdout."""
    from greenbench.reporting.terminal import console

    table, total, unknown = cluster_plan_table(specs, db_path, options, resume=resume)
    console.print(table)
    line = f"total of the known estimates: ~{clock(total)} of job time"
    if unknown:
        line += f"; {unknown} configuration(s) unknown, each limited to {options.time_min} min"
    console.print(escape(line) + " (nothing was submitted or written)")
