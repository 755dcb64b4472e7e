"""`greenbench run` with a cluster executor: dry run, submission, waiting, the summary."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from greenbench.cluster.job_arrays import plan_jobs
from greenbench.cluster.manifest import jobs_dir
from greenbench.cluster.options import ClusterOptions
from greenbench.cluster.sbatch import dry_run_text
from greenbench.cluster.submit import nothing_fits, submit
from greenbench.cluster.watch import wait_with_progress
from greenbench.errors import DoesNotFit, SpecError
from greenbench.launcher.launch import install_interrupt_handlers
from greenbench.launcher.progress import print_summary
from greenbench.settings.runspec import RunSpec


def run_on_cluster(
    specs: list[RunSpec],
    db_path: Path,
    *,
    executor: str,
    options: ClusterOptions,
    python_path: list[str],
    resume: bool,
    force: bool,
    devices: int | None,
    dry_run: bool,
    wait: bool,
) -> int:
    """Run ``specs`` as cluster jobs; the exit status (1 when a configuration did not finish
    ok, as `greenbench run` on one machine)."""
    console = Console(stderr=True, soft_wrap=True)  # long lines stay whole, for logs and grep
    if dry_run:
        if executor != "slurm":
            raise SpecError("--dry-run shows what sbatch would get: use it with --executor slurm")
        plan = plan_jobs(specs, options)
        if not plan.arrays:
            raise DoesNotFit(nothing_fits(plan.left_out))
        folder = jobs_dir(db_path) / "<submission>"
        for line in dry_run_text(plan, options, db_path.absolute(), folder):
            click.echo(line)
        return 0
    if not wait and executor == "submitit-local":
        raise SpecError(
            "--no-wait needs a cluster's scheduler: the submitit-local executor runs its jobs "
            "one after another from this process"
        )
    manifest = submit(
        specs,
        db_path,
        executor=executor,
        options=options,
        python_path=python_path,
        force=force,
        devices=devices,
        resume=resume,
        say=lambda line: console.print(escape(line)),
    )
    if manifest is None:
        return 0
    jobs = len(manifest.jobs)
    console.print(
        f"submission {manifest.submission_id}: {sum(len(j.run_ids) for j in manifest.jobs)} "
        f"configuration(s) in {jobs} job(s) ({executor}); logs in {escape(str(manifest.folder))}"
    )
    if not wait:
        ids = ", ".join(j.job_id or "?" for j in manifest.jobs)
        console.print(
            f"submitted job(s) {escape(ids)}; `greenbench status --db {escape(str(db_path))}` "
            "collects their results as they end"
        )
        return 0
    install_interrupt_handlers()  # SIGTERM as Ctrl-C: a local job stopped and stored
    rows = wait_with_progress(manifest, poll_s=options.poll_s, console=console)
    print_summary(console, rows, db_path)
    return 1 if any(status not in ("ok", "skipped") for _, status, _ in rows) else 0
