"""submitit, the one way greenbench reaches a scheduler: executors, job handles, job states.

``slurm`` submits job arrays through submitit's ``SlurmExecutor`` (sbatch, sacct, scancel);
``submitit-local`` runs the same jobs as subprocesses of this machine through submitit's
``LocalExecutor``, one at a time (jobs sharing one machine would measure each other), which is
how the cluster path is tested without SLURM; a local job's controller (submitit's process
between greenbench and the job) runs in a session of its own, its output in the job's folder,
and stopping a local job signals the job itself (``cancel_local``). What a job's end means for
its runs is said here once (``JobEnd``): done, failed or interrupted, with the scheduler's words
for why.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from greenbench.cluster.job import RunJob
from greenbench.cluster.job_arrays import JobShape
from greenbench.errors import GreenbenchError

#: SLURM states of a job that is not over (submitit says UNKNOWN before sacct knows the job)
LIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "RESIZING", "SUSPENDED",
     "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "UNKNOWN"}
)  # fmt: skip
#: states of a job the scheduler stopped before it ended (its runs: interrupted)
STOPPED_STATES = frozenset({"TIMEOUT", "PREEMPTED", "CANCELLED", "DEADLINE", "INTERRUPTED"})
DONE_STATES = frozenset({"COMPLETED", "FINISHED"})


class ClusterUnavailable(GreenbenchError):
    """A cluster executor was asked for and what it needs (submitit, sbatch) is missing."""

    exit_code = 2


class SubmissionRefused(GreenbenchError):
    """The scheduler refused a submission (sbatch's own words: a partition or account it does
    not know, a limit the request breaks)."""

    exit_code = 2


def require_submitit(executor: str) -> ModuleType:
    """submitit, or one line saying how to install it."""
    try:
        import submitit
    except ImportError:
        raise ClusterUnavailable(
            f"--executor {executor} needs submitit, which is not installed: "
            "pip install 'greenbench[cluster]' (or add --dry-run to see what would be submitted)"
        ) from None
    return submitit


def require_scheduler(executor: str) -> ModuleType:
    """What submitting with ``executor`` needs, checked before anything is written."""
    submitit = require_submitit(executor)
    if executor == "slurm" and shutil.which("sbatch") is None:
        raise ClusterUnavailable(
            "--executor slurm needs SLURM's sbatch, which is not on PATH here: submit from a "
            "node of the cluster (its login node), or add --dry-run to see what would be submitted"
        )
    return submitit


def submit_jobs(
    executor: str,
    folder: Path,
    shape: JobShape,
    slurm: dict[str, Any],
    payloads: list[dict[str, Any]],
) -> list[str]:
    """Submit ``payloads`` (jobs of one array, of ``shape``) and return their job ids: one
    SLURM job array with the ``slurm`` parameters (`sbatch.slurm_parameters`), or one local
    subprocess per payload (the caller submits local jobs one at a time)."""
    submitit = require_scheduler(executor)
    if executor == "slurm":
        ex = submitit.SlurmExecutor(folder=folder / "%j")
        ex.update_parameters(**slurm)
    else:
        ex = _local_executor(submitit)(folder=folder / "%j")
        ex.update_parameters(
            timeout_min=shape.time_min,
            gpus_per_node=shape.gpus_per_node,
            tasks_per_node=1,
            nodes=1,
        )
    try:  # submitit prints sbatch's complaint too: it is kept for our one line instead
        with contextlib.redirect_stderr(io.StringIO()):
            jobs = ex.map_array(RunJob(), payloads)
    except (OSError, RuntimeError) as exc:  # sbatch said no (its stderr is the error's text)
        said = _last_line(str(exc)) or type(exc).__name__
        raise SubmissionRefused(f"submitting to {executor} failed: {said}") from None
    with contextlib.suppress(OSError):  # submitit's staging folder, empty once submitted
        (folder / "%j").rmdir()
    if executor != "slurm":
        _LOCAL_JOBS.update((str(job.job_id), job) for job in jobs)
    return [str(job.job_id) for job in jobs]


def _local_executor(submitit: ModuleType) -> type:
    """submitit's ``LocalExecutor``, its jobs' controllers started by ``start_controller``."""

    class LocalExecutor(submitit.LocalExecutor):
        def _submit_command(self, command: str) -> Any:
            return start_controller(self, command)

    return LocalExecutor


def start_controller(executor: Any, command: str) -> Any:
    """Start a local job's controller as submitit's ``start_controller`` does (the same
    environment; the process that starts the job, passes signals on to it and ends with it),
    with two differences. It runs in a session of its own: a terminal's Ctrl-C reaches
    greenbench alone, which stops the job as for SIGTERM (``cancel_local``), rather than both
    the controller and the job, the controller then SIGKILLing the job a second later. Its
    output goes to ``<job id>/<job id>_controller.log`` in the job's folder: a controller
    stopped as submitit cancels prints a traceback, which belongs there, not on the terminal."""
    from submitit.core import utils
    from submitit.local.local import LocalJob

    params = executor.parameters
    ntasks = params.get("tasks_per_node", 1)
    env = os.environ | {
        "SUBMITIT_LOCAL_NTASKS": str(ntasks),
        "SUBMITIT_LOCAL_COMMAND": command,
        "SUBMITIT_LOCAL_TIMEOUT_S": str(int(60 * params.get("timeout_min", 2.0))),
        "SUBMITIT_LOCAL_SIGNAL_DELAY_S": str(int(params.get("signal_delay_s", 30))),
        "SUBMITIT_LOCAL_NODEID": "0",
        "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
        "SUBMITIT_STDERR_TO_STDOUT": "",
        "SUBMITIT_EXECUTOR": "local",
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(params.get("gpus_per_node", 0)))),
        "SUBMITIT_LOCAL_WITH_SHELL": "",
    }
    staging = utils.JobPaths.get_first_id_independent_folder(executor.folder)
    staging.mkdir(parents=True, exist_ok=True)
    log = staging / f".controller-{uuid.uuid4().hex}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "submitit.local._local", str(executor.folder)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    job_id = str(process.pid)
    job_folder = utils.JobPaths(executor.folder, job_id=job_id).folder
    job_folder.mkdir(parents=True, exist_ok=True)
    log.rename(job_folder / f"{job_id}_controller.log")
    return LocalJob(
        folder=executor.folder, job_id=job_id, process=process, tasks=list(range(ntasks))
    )


#: local jobs this process started, by id: their state comes from their process (let go at
#: exit, while submitit can still run the jobs' own clean-up)
_LOCAL_JOBS: dict[str, Any] = {}
atexit.register(_LOCAL_JOBS.clear)


@dataclass(frozen=True, slots=True)
class JobEnd:
    """How a job ended: ``status`` for the runs it did not store itself (None: it ended
    well), and the scheduler's ``reason``."""

    state: str
    status: str | None
    reason: str


def job_states(executor: str, folder: Path, job_ids: list[str]) -> dict[str, str]:
    """The scheduler's state of each job, in SLURM's words (one ``sacct`` call for them all;
    a local job: ``RUNNING`` while its process lives, then ``FINISHED`` or ``INTERRUPTED``)."""
    if executor != "slurm":
        return {job_id: _local_state(job_id) for job_id in job_ids}
    submitit = require_submitit(executor)
    jobs = {job_id: submitit.SlurmJob(folder=folder / "%j", job_id=job_id) for job_id in job_ids}
    if jobs:
        submitit.SlurmJob.watcher.update()
    return {job_id: str(job.state).split()[0] for job_id, job in jobs.items()}  # CANCELLED by 7


def job_state(executor: str, folder: Path, job_id: str) -> str:
    """The scheduler's state of one job (see ``job_states``)."""
    return job_states(executor, folder, [job_id])[job_id]


def _local_state(job_id: str) -> str:
    """A local job's state from its controller process (the job id is its pid): RUNNING while
    it lives, INTERRUPTED if a signal ended it, else FINISHED."""
    job = _LOCAL_JOBS.get(job_id)
    if job is not None:  # started by this process: submitit reads its process
        return str(job.state)
    try:
        os.kill(int(job_id), 0)
    except (ProcessLookupError, ValueError):
        return "FINISHED"
    except PermissionError:
        pass
    return "RUNNING"


def job_end(executor: str, folder: Path, job_id: str, state: str) -> JobEnd:
    """What the end of a job means for its runs, from its state and submitit's record of its
    outcome (the error it raised, or why it left no record)."""
    from submitit.core import utils

    paths = utils.JobPaths(folder / "%j", job_id=job_id)
    outcome = None
    if paths.result_pickle.exists():
        try:
            outcome = utils.pickle_load(paths.result_pickle)
        except Exception:  # a result cut short is no result
            outcome = None
    if outcome is not None and outcome[0] == "success" and state in DONE_STATES:
        return JobEnd(state, None, f"job {job_id} {state}")
    if outcome is not None and outcome[0] == "error":
        why = _last_line(str(outcome[1])) or "an error"
        stopped = state in STOPPED_STATES or "KeyboardInterrupt" in why
        status = "interrupted" if stopped else "failed"
        return JobEnd(state, status, f"job {job_id} {state}: {why}")
    tail = _last_line(_read(paths.stderr))
    stopped = state in STOPPED_STATES or tail.startswith("KeyboardInterrupt")
    status = "interrupted" if stopped else "failed"
    said = f" (last line of its log: {tail})" if tail else ""
    return JobEnd(state, status, f"job {job_id} {state} without a result{said}")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def cancel_local(job_id: str, *, hard: bool = False) -> None:
    """Stop a local job this process started: SIGINT to the job's own process, whose launcher
    stores the run in progress interrupted, stops its ranks (and puts back a GPU power limit)
    and ends, its controller with it. ``hard``, or when the job has no process yet: as
    submitit cancels, SIGINT to the controller, which passes it on and SIGKILLs the job a
    second later (too soon for a job still stopping its ranks: a last resort)."""
    job = _LOCAL_JOBS.get(job_id)
    if job is None or str(job.state) != "RUNNING":
        return
    if not hard:
        try:
            tasks = psutil.Process(int(job_id)).children()
        except psutil.Error:
            tasks = []
        for task in tasks:
            with contextlib.suppress(psutil.Error):
                task.send_signal(signal.SIGINT)
        if tasks:
            return
    job.cancel()
