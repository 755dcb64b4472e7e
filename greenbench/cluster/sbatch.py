"""The parameters a job array is submitted with, and `--dry-run`'s account of them.

``slurm_parameters`` is the one source: its dict goes to submitit's ``SlurmExecutor``
(``update_parameters``; submitit writes the ``#SBATCH`` lines from it), and ``sbatch_lines``
renders the same dict as those lines, so a dry run shows what would be submitted without
SLURM, a cluster, or submitit (a test checks the lines against submitit's own sbatch file).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from greenbench.cluster.job_arrays import JobArray, Plan
from greenbench.cluster.options import ClusterOptions

#: submitit parameters that are not #SBATCH flags
_NOT_FLAGS = ("array_parallelism", "setup")


def slurm_parameters(array: JobArray, options: ClusterOptions) -> dict[str, Any]:
    """``SlurmExecutor.update_parameters`` keywords for ``array`` (one task per node: the
    configuration's launcher, which starts the node's ranks)."""
    shape = array.shape
    params: dict[str, Any] = {
        "job_name": array.name,
        "nodes": shape.nodes,
        "ntasks_per_node": 1,
        "cpus_per_task": shape.cpus_per_task,
        "time": shape.time_min,
        "array_parallelism": options.array_parallelism,
    }
    if shape.gpus_per_node:
        params["gpus_per_node"] = shape.gpus_per_node
    if options.mem_gb is not None:
        params["mem"] = f"{options.mem_gb}GB"
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(options, key) is not None:
            params[key] = getattr(options, key)
    if options.exclusive:
        params["exclusive"] = True
    if options.setup:
        params["setup"] = list(options.setup)
    return params


def sbatch_lines(params: dict[str, Any], jobs: int) -> list[str]:
    """The ``#SBATCH`` lines of ``params`` for an array of ``jobs`` jobs, as submitit writes
    them (its log paths and signal aside)."""
    flags = {k: v for k, v in params.items() if k not in _NOT_FLAGS}
    if jobs > 1:  # submitit submits a lone job as no array
        flags["array"] = f"0-{jobs - 1}%{min(jobs, params['array_parallelism'])}"
    return [_flag(key, flags[key]) for key in sorted(flags)]


def _flag(key: str, value: Any) -> str:
    key = key.replace("_", "-")
    if value is True:
        return f"#SBATCH --{key}"
    return f"#SBATCH --{key}={shlex.quote(str(value))}"


def dry_run_text(plan: Plan, options: ClusterOptions, db_path: Path, folder: Path) -> list[str]:
    """What `greenbench run --executor slurm --dry-run` prints: per array, its #SBATCH lines,
    setup and command, and which configurations each array index runs; then those left out."""
    arrays = plan.arrays
    total = sum(a.configurations for a in arrays)
    jobs = sum(len(a.jobs) for a in arrays)
    lines = [
        f"dry run: {total} configuration(s) as {jobs} job(s) in {len(arrays)} SLURM job "
        f"array(s); nothing submitted, nothing written",
        f"results: shards in {db_path}.shards/, merged into {db_path} (a path every node must "
        "reach: a shared file system)",
    ]
    for array in arrays:
        params = slurm_parameters(array, options)
        lines += ["", f"# array {array.name}: {len(array.jobs)} job(s), {array.shape.text()}"]
        lines += sbatch_lines(params, len(array.jobs))
        lines += [*params.get("setup", [])]
        lines.append(
            f"srun --unbuffered python -u -m submitit.core._submit {folder} "
            "# runs greenbench.cluster.job.RunJob: the job's configurations, each run to a shard"
        )
        for index, job in enumerate(array.jobs):
            lines += [f"#   [{index}] {spec.name}" for spec in job.specs]
    if plan.left_out:
        lines += ["", f"# left out ({len(plan.left_out)}; stored skipped when submitted):"]
        lines += [f"#   {spec.name}: {why}" for spec, why in plan.left_out]
    return lines
