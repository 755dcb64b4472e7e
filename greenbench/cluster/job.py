"""What a cluster job runs on its node(s): its configurations, each run to a result shard.

submitit starts ``RunJob`` once per node of the allocation (one task per node). Each task is a
greenbench launcher as on one machine: node 0's runs the configurations, starting its ranks
through torchrun, and writes every run to its own shard beside the database; the other nodes'
start their ranks and store nothing (``run_specs``'s multi-node path, the rendezvous at node 0,
the first of the allocation's hosts). A configuration spanning fewer nodes than the allocation
(a fixed request) runs on its first nodes; the others sit it out. Each node's ranks read their
own GPUs' energy and each node's local rank 0 its CPU and DRAM, as in any multi-node run.

The job never opens the database. Signals stay submitit's: a preempted job is requeued by
submitit with the configurations whose shard is not yet written (``RunJob.checkpoint``), a
timed-out or cancelled one ends, and the submitter stores what it had not finished with the
scheduler's reason.
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Any

from greenbench.settings.runspec import RunSpec
from greenbench.store.connection import shard_dir
from greenbench.store.writer import SHARD_SUFFIX

#: rendezvous ports, one per job id in this range, so that two jobs sharing a node do not meet
_PORTS = (20000, 30000)


def rendezvous_port(job_id: str) -> int:
    """A port for the job's torchrun rendezvous, fixed by its id (every node computes it)."""
    low, high = _PORTS
    return low + zlib.crc32(job_id.encode()) % (high - low)


class RunJob:
    """The function a job runs: ``RunJob()(payload)``. ``payload`` holds the database's path,
    the configurations (``RunSpec.to_dict``), their run ids, the suite's python_path, the
    launcher's ``force`` and ``devices``, and the job's time limit (``time_min``)."""

    def __call__(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        import submitit

        from greenbench.launcher.launch import RunOptions, run_specs
        from greenbench.user.entry import add_python_path

        self.started = time.monotonic()
        add_python_path(payload.get("python_path", []))
        specs = [RunSpec.from_dict(d) for d in payload["specs"]]
        env = submitit.JobEnvironment()
        done: list[dict[str, Any]] = []
        for nnodes, members in node_groups(specs, payload["run_ids"]):
            if env.node >= nnodes:  # this node has no part in these configurations
                continue
            rdzv = None
            if nnodes > 1:
                port = rendezvous_port(f"{env.job_id}-{nnodes}")
                rdzv = {"endpoint": f"{env.hostnames[0]}:{port}", "node_rank": env.node}
            options = RunOptions(
                rdzv=rdzv,
                force=payload.get("force", False),
                devices=payload.get("devices"),
                run_ids=[run_id for _, run_id in members],
                to_shards=True,
            )
            summary = run_specs([spec for spec, _ in members], Path(payload["db"]), options)
            done += [
                {"run_id": run_id, "name": name, "status": status, "error": error}
                for run_id, name, status, error in zip(
                    summary.run_ids, summary.names, summary.statuses, summary.errors, strict=True
                )
            ]
        return done

    def checkpoint(self, payload: dict[str, Any]) -> Any:
        """submitit calls this from its signal handler when SLURM warns of the job's end. A
        preempted job is requeued with the configurations not yet stored in a shard; a job at
        its time limit is not (it would only time out again): None, and its unfinished runs are
        stored interrupted with the scheduler's TIMEOUT."""
        import submitit

        if self.timed_out(payload.get("time_min")):
            return None
        return submitit.helpers.DelayedSubmission(self, remaining(payload))

    def timed_out(self, time_min: float | None) -> bool:
        """Whether the job has used its time (submitit's own rule: past 80 % of the limit, or
        within ten minutes of it)."""
        if time_min is None or not hasattr(self, "started"):
            return False
        limit_s = time_min * 60
        return time.monotonic() - self.started >= min(0.8 * limit_s, limit_s - 600)


def node_groups(
    specs: list[RunSpec], run_ids: list[str]
) -> list[tuple[int, list[tuple[RunSpec, str]]]]:
    """The job's configurations by the nodes they span, the widest first: node k takes part in
    the groups spanning more than k nodes, which come first, so every node of a group starts
    it together (a node waiting for the others at a rendezvous would time out)."""
    from greenbench.launcher.runners import runner_for

    groups: dict[int, list[tuple[RunSpec, str]]] = {}
    for spec, run_id in zip(specs, run_ids, strict=True):
        groups.setdefault(runner_for(spec).shape(spec).nodes, []).append((spec, run_id))
    return sorted(groups.items(), key=lambda item: -item[0])


def remaining(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` without the configurations whose run is already in a shard."""
    folder = shard_dir(payload["db"])
    keep = [
        i
        for i, run_id in enumerate(payload["run_ids"])
        if not (folder / f"{run_id}{SHARD_SUFFIX}").exists()
    ]
    return payload | {
        "specs": [payload["specs"][i] for i in keep],
        "run_ids": [payload["run_ids"][i] for i in keep],
    }
