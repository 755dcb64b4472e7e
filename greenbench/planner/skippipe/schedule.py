"""A SkipPipe schedule: which nodes each microbatch visits, and in which order every node works.

A microbatch starts on its data node (stage 0: embedding and first layers), is sent forward
through the nodes of its ``path``, comes back to its data node for the head and the loss, and
its gradients travel the path in reverse, back to the data node. ``path`` lists the nodes data
node first and last: ``(d, n1, n2, n3, d)``. Each node does three kinds of work (`Task`): ``F``
(a forward), ``L`` (the loss, on data nodes only) and ``B`` (a backward). A node's `Schedule.order`
is the sequence it processes its tasks in; that sequence, with the paths, is everything a runner
needs (what to receive from whom, compute, and send to whom).

The rules a schedule must keep (`violations`, after SkipPipe):

* a path starts and ends at a data node, visits ``stages_per_path`` stages counting stage 0,
  never a stage twice, and its stages come in increasing order but for at most ``max_swaps``
  swaps of two adjacent stages (``1, 3, 2, 5`` is one swap; ``3, 1`` is none allowed);
* every data node sends ``microbatches_per_data_node`` microbatches, and every stage after
  stage 0 gets an even share of the visits (counts differ by at most one);
* a node's order lists each of its tasks once, a microbatch's forward before its backward;
* memory: along any node's order, at most M (``Topology.memory_microbatches``) microbatches are
  between their forward and their backward;
* the orders can all be followed: no node waits on work another node will only do after it.

Skip ratio ``k``: a microbatch visits stage 0 and ``round((S − 1)(1 − k))`` (at least one) of
the ``S − 1`` other stages (`IterationShape.from_skip_ratio`, the rule of the runner's own paths in
``greenbench.strategies.skippipe.routes``); with 6 stages and k = 1/3 that is stage 0 and three of
the five others, SkipPipe's 33 % skip.

Why our own: no kept library schedules pipelines whose microbatches skip and reorder stages
(GPipe, 1F1B and interleaved schedules send every microbatch through every stage in order).
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

from greenbench.errors import GreenbenchError, SpecError
from greenbench.planner.skippipe.topology import Topology

PHASES = ("F", "L", "B")


class InvalidSchedule(GreenbenchError):
    """A schedule breaks one of SkipPipe's rules (the message lists which)."""


@dataclass(frozen=True, slots=True)
class IterationShape:
    """What one iteration asks of a scheduler: microbatches per data node, how many stages each
    visits (stage 0 included) and how many adjacent-stage swaps a path may make."""

    microbatches_per_data_node: int
    stages_per_path: int
    max_swaps: int = 1

    def __post_init__(self) -> None:
        if self.microbatches_per_data_node < 1 or self.stages_per_path < 2 or self.max_swaps < 0:
            raise SpecError(
                "an iteration needs at least one microbatch per data node, paths of at least "
                "two stages and a non-negative swap bound"
            )

    @classmethod
    def from_skip_ratio(
        cls, n_stages: int, skip_ratio: float, microbatches_per_data_node: int, max_swaps: int = 1
    ) -> IterationShape:
        """Paths of stage 0 and ``round((n_stages − 1)(1 − skip_ratio))`` others, at least one
        (module docstring)."""
        if not 0.0 <= skip_ratio < 1.0 or n_stages < 2:
            raise SpecError(f"skip ratio {skip_ratio} must be in [0, 1), with 2 stages or more")
        others = max(1, round((n_stages - 1) * (1.0 - skip_ratio)))
        return cls(microbatches_per_data_node, 1 + others, max_swaps)


@dataclass(frozen=True, slots=True)
class Task:
    """One piece of work on a node: ``phase`` F, L or B of microbatch ``microbatch``."""

    microbatch: int
    phase: str


@dataclass(frozen=True, slots=True)
class Microbatch:
    """Microbatch ``id``: its ``path`` (data node first and last) and ``release_s``, the earliest
    its first forward may start (0: as soon as its data node's order allows)."""

    id: int
    path: tuple[int, ...]
    release_s: float = 0.0

    @property
    def data_node(self) -> int:
        return self.path[0]

    @property
    def nodes(self) -> tuple[int, ...]:
        """The nodes it visits, data node first, each once."""
        return self.path[:-1]

    def next_node(self, node: int) -> int:
        """Where ``node`` sends this microbatch's activations after its forward (the data node
        after the last stage, for the loss)."""
        return self.path[self.path.index(node) + 1]

    def previous_node(self, node: int) -> int | None:
        """Where ``node`` sends this microbatch's gradients after its backward (None on the data
        node, where the backward ends)."""
        i = self.path.index(node)
        return None if i == 0 else self.path[i - 1]

    def steps(self) -> list[tuple[int, str]]:
        """Its tasks in the order they happen: forwards along the path, the loss on the data
        node, backwards along the path reversed."""
        nodes = self.nodes
        return [
            *((n, "F") for n in nodes),
            (self.data_node, "L"),
            *((n, "B") for n in reversed(nodes)),
        ]


@dataclass(frozen=True, slots=True)
class Schedule:
    """Microbatches (``microbatches[i].id == i``) and every node's order of work.
    ``planned_s``: the iteration time the scheduler planned, where it planned times."""

    name: str
    microbatches: tuple[Microbatch, ...]
    order: tuple[tuple[Task, ...], ...]
    planned_s: float | None = None

    def tasks_on(self, node: int) -> tuple[Task, ...]:
        return self.order[node]

    def stage_visits(self, topology: Topology) -> tuple[int, ...]:
        """Microbatches that visit each stage."""
        counts = Counter(topology.stage_of(n) for mb in self.microbatches for n in mb.nodes)
        return tuple(counts[s] for s in range(topology.n_stages))

    def node_visits(self, n_nodes: int) -> tuple[int, ...]:
        counts = Counter(n for mb in self.microbatches for n in mb.nodes)
        return tuple(counts[n] for n in range(n_nodes))


def runner_order(schedule: Schedule, topology: Topology) -> dict[int, tuple[tuple[str, int], ...]]:
    """Every node's order in the task names of the runner (``greenbench.strategies.skippipe``):
    on a data node ``E`` (its forward), ``L`` and ``G`` (its backward); elsewhere ``F`` and
    ``B``; each with its microbatch."""
    data = {"F": "E", "L": "L", "B": "G"}
    return {
        node: tuple(
            (data[t.phase] if topology.stage_of(node) == 0 else t.phase, t.microbatch)
            for t in tasks
        )
        for node, tasks in enumerate(schedule.order)
    }


def swaps(stages: Sequence[int]) -> int | None:
    """Adjacent-stage swaps that turn the sorted ``stages`` into this order: its inversions,
    each of two stages one apart; None when an inversion pairs stages further apart."""
    count = 0
    for a, b in itertools.combinations(stages, 2):
        if a > b:
            if a - b != 1:
                return None
            count += 1
    return count


def stage_orders(
    n_stages: int, stages_per_path: int, max_swaps: int
) -> tuple[tuple[int, ...], ...]:
    """Every allowed sequence of the stages after stage 0 a path may visit, in order."""
    k = stages_per_path - 1
    out = []
    for subset in itertools.combinations(range(1, n_stages), k):
        for perm in itertools.permutations(subset):
            s = swaps(perm)
            if s is not None and s <= max_swaps:
                out.append(perm)
    return tuple(out)


def order_from_starts(
    microbatches: Sequence[Microbatch],
    n_nodes: int,
    starts: dict[tuple[int, str, int], float],
) -> tuple[tuple[Task, ...], ...]:
    """Every node's order, its tasks sorted by ``starts[(microbatch, phase, node)]`` (ties:
    phase B, L, F, then microbatch id)."""
    rank = {"B": 0, "L": 1, "F": 2}
    per_node: list[list[tuple[float, int, int, Task]]] = [[] for _ in range(n_nodes)]
    for mb in microbatches:
        for node, phase in mb.steps():
            t = starts[mb.id, phase, node]
            per_node[node].append((t, rank[phase], mb.id, Task(mb.id, phase)))
    return tuple(tuple(item[-1] for item in sorted(tasks)) for tasks in per_node)


def _path_problems(mb: Microbatch, topology: Topology, shape: IterationShape) -> list[str]:
    p, n = mb.path, len(topology.nodes)
    if len(p) < 2 or p[0] != p[-1] or not 0 <= p[0] < n or topology.stage_of(p[0]) != 0:
        return [f"microbatch {mb.id}: path {list(p)} must start and end at one data node"]
    middle = p[1:-1]
    if any(not 0 <= x < n for x in middle):
        return [f"microbatch {mb.id}: path {list(p)} names a node outside 0..{n - 1}"]
    stages = [topology.stage_of(x) for x in middle]
    problems = []
    if 0 in stages:
        problems.append(f"microbatch {mb.id}: path {list(p)} visits stage 0 in its middle")
    if len(set(stages)) != len(stages):
        problems.append(f"microbatch {mb.id}: path {list(p)} visits a stage twice")
    if len(middle) + 1 != shape.stages_per_path:
        problems.append(
            f"microbatch {mb.id}: path visits {len(middle) + 1} stages, not {shape.stages_per_path}"
        )
    s = swaps(stages)
    if s is None or s > shape.max_swaps:
        problems.append(
            f"microbatch {mb.id}: stage order {stages} needs more than {shape.max_swaps} "
            "adjacent-stage swaps"
        )
    return problems


def _order_problems(schedule: Schedule, topology: Topology) -> list[str]:
    n = len(topology.nodes)
    if len(schedule.order) != n:
        return [f"the schedule orders {len(schedule.order)} nodes, the topology has {n}"]
    problems = []
    for node in range(n):
        expected = Counter(
            Task(mb.id, ph) for mb in schedule.microbatches for x, ph in mb.steps() if x == node
        )
        got = Counter(schedule.order[node])
        if got != expected:
            problems.append(f"node {node}: its order does not list each of its tasks once")
            continue
        seen: set[Task] = set()
        in_flight = peak = 0
        data = topology.stage_of(node) == 0
        before = {"F": (), "L": ("F",), "B": ("F", "L") if data else ("F",)}
        for task in schedule.order[node]:
            if any(Task(task.microbatch, ph) not in seen for ph in before[task.phase]):
                problems.append(
                    f"node {node}: {task.phase} of microbatch {task.microbatch} comes before "
                    "its forward (or loss)"
                )
                break
            seen.add(task)
            in_flight += {"F": 1, "L": 0, "B": -1}[task.phase]
            peak = max(peak, in_flight)
        if peak > topology.memory_microbatches:
            problems.append(
                f"node {node}: holds {peak} microbatches at once, memory allows "
                f"{topology.memory_microbatches}"
            )
    if not problems and not _followable(schedule):
        problems.append("the orders cannot all be followed: some nodes wait on each other")
    return problems


def _followable(schedule: Schedule) -> bool:
    """Whether the task graph (each microbatch's steps in sequence, each node's order in
    sequence) has no cycle (Kahn's algorithm)."""
    succ: dict[tuple[int, str, int], list[tuple[int, str, int]]] = {}
    indeg: Counter[tuple[int, str, int]] = Counter()

    def edge(a: tuple[int, str, int], b: tuple[int, str, int]) -> None:
        succ.setdefault(a, []).append(b)
        indeg[b] += 1

    tasks = []
    for mb in schedule.microbatches:
        steps = [(mb.id, ph, node) for node, ph in mb.steps()]
        tasks.extend(steps)
        for a, b in itertools.pairwise(steps):
            edge(a, b)
    for node, order in enumerate(schedule.order):
        keyed = [(t.microbatch, t.phase, node) for t in order]
        for a, b in itertools.pairwise(keyed):
            edge(a, b)
    queue = deque(t for t in tasks if indeg[t] == 0)
    done = 0
    while queue:
        t = queue.popleft()
        done += 1
        for nxt in succ.get(t, ()):
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                queue.append(nxt)
    return done == len(tasks)


def violations(schedule: Schedule, topology: Topology, shape: IterationShape) -> list[str]:
    """Every rule ``schedule`` breaks on ``topology`` (module docstring); empty when it keeps
    them all."""
    problems: list[str] = []
    mbs = schedule.microbatches
    if [mb.id for mb in mbs] != list(range(len(mbs))):
        return ["microbatch ids must be 0..N-1 in order"]
    for mb in mbs:
        problems += _path_problems(mb, topology, shape)
    if problems:
        return problems
    per_data_node = Counter(mb.data_node for mb in mbs)
    for d in topology.data_nodes:
        if per_data_node[d] != shape.microbatches_per_data_node:
            problems.append(
                f"data node {d} sends {per_data_node[d]} microbatches, "
                f"not {shape.microbatches_per_data_node}"
            )
    visits = schedule.stage_visits(topology)[1:]
    if max(visits) - min(visits) > 1:
        problems.append(f"stages 1.. get uneven shares of microbatches: {list(visits)}")
    return problems + _order_problems(schedule, topology)


def validate(schedule: Schedule, topology: Topology, shape: IterationShape) -> Schedule:
    """``schedule`` itself when it keeps every rule; InvalidSchedule listing what it breaks."""
    problems = violations(schedule, topology, shape)
    if problems:
        shown = "; ".join(problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise InvalidSchedule(f"schedule {schedule.name!r} breaks SkipPipe's rules: {shown}{more}")
    return schedule
