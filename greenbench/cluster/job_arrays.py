"""How a suite's configurations become cluster jobs: one job array per shape of request.

A configuration needs ``nnodes`` nodes, one task on each (its launcher, which starts the node's
ranks through torchrun as on one machine), a GPU per rank where it runs on GPUs, and
``cpus_per_rank`` cores per rank. By default each job asks for what its configurations need,
and configurations needing the same are one SLURM job array (an array's jobs all get the same
resources), ``per_job`` configurations to a job, in suite order. A fixed request (``nodes``,
``gpus_per_node``) makes every job ask exactly that: configurations needing less run on part
of the allocation, and one needing more is left out with its reason (stored skipped, as on a
machine with too few devices).

Every configuration gets its run id here, before submission, so the submitter knows which runs
each job owes the database whatever becomes of the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from greenbench.cluster.options import ClusterOptions
from greenbench.errors import SpecError
from greenbench.launcher.runners import runner_for
from greenbench.settings.runspec import RunSpec
from greenbench.store import new_run_id


@dataclass(frozen=True, slots=True)
class JobShape:
    """What one job of an array asks the scheduler for."""

    nodes: int
    gpus_per_node: int
    cpus_per_task: int
    time_min: int

    def text(self) -> str:
        gpus = f" × {self.gpus_per_node} GPU" if self.gpus_per_node else " (no GPU)"
        return f"{self.nodes} node(s){gpus}, {self.cpus_per_task} CPUs, {self.time_min} min"


@dataclass(slots=True)
class PlannedJob:
    """The configurations one job runs, in order, with the run id each is stored under."""

    specs: list[RunSpec]
    run_ids: list[str]


@dataclass(slots=True)
class JobArray:
    """Jobs with one shape: submitted as one array."""

    name: str
    shape: JobShape
    jobs: list[PlannedJob] = field(default_factory=list)

    @property
    def configurations(self) -> int:
        return sum(len(job.specs) for job in self.jobs)


@dataclass(slots=True)
class Plan:
    """The job arrays, and the configurations left out of them with why."""

    arrays: list[JobArray]
    left_out: list[tuple[RunSpec, str]]


def uses_gpus(spec: RunSpec) -> bool:
    """Whether ``spec``'s ranks each want a GPU of the node: a run on cuda, or on ``auto`` (a
    cluster's nodes are taken to have GPUs; say ``--device cpu`` for CPU nodes). Simulated
    runs and those on emulated GPUs run on CPU ranks."""
    c = spec.config
    if not runner_for(spec).shape(spec).launches_ranks or (c.emulate is not None and c.emulate.gpu):
        return False
    return c.run.device in ("cuda", "auto")


def needs(spec: RunSpec) -> tuple[int, int, int]:
    """(nodes, GPUs per node, ranks per node) ``spec`` needs."""
    shape = runner_for(spec).shape(spec)  # a simulation: one node, one process, no GPU
    return shape.nodes, shape.ranks_per_node if uses_gpus(spec) else 0, shape.ranks_per_node


def plan_jobs(specs: list[RunSpec], options: ClusterOptions, *, one_node: bool = False) -> Plan:
    """Group ``specs`` into job arrays (see the module's text); ``one_node`` (an executor that
    runs jobs on this machine) refuses a configuration spanning nodes with one line."""
    groups: dict[tuple[int, int, int], list[RunSpec]] = {}
    left_out: list[tuple[RunSpec, str]] = []
    for spec in specs:
        nodes, gpus, ranks = needs(spec)
        if one_node and nodes > 1:
            raise SpecError(
                f"{spec.name} spans {nodes} nodes; the submitit-local executor runs jobs on this "
                "machine only (use --executor slurm)"
            )
        if options.nodes is not None and nodes > options.nodes:
            left_out.append((spec, f"needs {nodes} nodes; the request gives {options.nodes}"))
            continue
        if options.gpus_per_node is not None and gpus > options.gpus_per_node:
            why = f"needs {gpus} GPUs per node; the request gives {options.gpus_per_node}"
            left_out.append((spec, why))
            continue
        if options.gpus_per_node is not None:  # the request's GPUs, CPUs for as many ranks
            gpus = options.gpus_per_node
            ranks = max(ranks, gpus)
        key = (options.nodes or nodes, gpus, options.cpus_per_rank * ranks)
        groups.setdefault(key, []).append(spec)
    if options.nodes is not None or options.gpus_per_node is not None:
        groups = _one_request(groups)
    if not groups:
        return Plan([], left_out)
    suite = next((sp.suite for sp in specs if sp.suite), None) or specs[0].workload
    arrays = []
    for (nodes, gpus, cpus), members in groups.items():
        chunks = [members[i : i + options.per_job] for i in range(0, len(members), options.per_job)]
        shape = JobShape(nodes, gpus, cpus, options.time_min * max(len(c) for c in chunks))
        name = f"greenbench-{suite}-{nodes}n{gpus}g{cpus}c"
        jobs = [PlannedJob(list(c), [new_run_id() for _ in c]) for c in chunks]
        arrays.append(JobArray(name, shape, jobs))
    return Plan(arrays, left_out)


def _one_request(
    groups: dict[tuple[int, int, int], list[RunSpec]],
) -> dict[tuple[int, int, int], list[RunSpec]]:
    """Under a fixed request, groups asking the same nodes and GPUs become one, asking the most
    CPUs any of them needs."""
    merged: dict[tuple[int, int], tuple[int, list[RunSpec]]] = {}
    for (nodes, gpus, cpus), members in groups.items():
        most, specs = merged.get((nodes, gpus), (0, []))
        merged[(nodes, gpus)] = (max(most, cpus), specs + members)
    return {(n, g, cpus): specs for (n, g), (cpus, specs) in merged.items()}
