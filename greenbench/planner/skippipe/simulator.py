"""A discrete-event simulation of one SkipPipe iteration: iteration time, per-node busy and idle
seconds, per-stage load, and the collisions a schedule left in.

Model (after SkipPipe's simulator, ``reference/skippipe-network.md``): a microbatch's forward
runs along its path (`Microbatch.steps`), the loss on its data node costs 0.25 × that node's
forward, and the backward (1.5 × forward per node) runs the path in reverse; every hop adds the
topology's link delay (`Topology.link_s`). A node does one task at a time and a task starts only
once its input has arrived. Links are not shared resources: a hop's delay does not grow with the
traffic beside it (as in SkipPipe's simulator). The iteration ends when the last backward ends
(no optimizer step or data-parallel synchronisation is simulated).

Two ways to run:

* ``follow_order=True`` (default): every node works through its `Schedule.order`, a
  microbatch's first forward no earlier than its ``release_s``. Start times then follow from
  the orders alone (a static schedule), computed in one pass over the task graph.
* ``follow_order=False``: first come, first served, the way a runtime without a plan behaves.
  An idle node takes the task that arrived first (ties: backward, loss, forward, then lower
  microbatch id); a data node with no arrived task starts its next microbatch (lowest id
  first), but only when every node on that microbatch's path can hold one more (memory M, held
  from that start until the microbatch's backward on the node ends), which keeps memory and
  cannot deadlock. The builders of unplanned schedules take their orders from this run
  (`fifo_schedule`).

A *collision* is a task whose input arrived while its node was computing another microbatch: it
queues. A no-wait timetable (`planner`) leaves none; a timetable that plans a microbatch to wait
for a node counts that wait too.

`simulate_energy` turns busy and idle seconds into joules at given busy and idle watts:
modelled, from a simulated timeline, never measured.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from greenbench.errors import GreenbenchError
from greenbench.planner.skippipe.schedule import Schedule, order_from_starts
from greenbench.planner.skippipe.topology import Topology

PRIORITY = {"B": 0, "L": 1, "F": 2}  # first come first served ties: drain memory first
_EPS = 1e-9


class SimulationStuck(GreenbenchError):
    """A schedule's orders make nodes wait on each other forever."""


@dataclass(frozen=True, slots=True)
class Interval:
    """Task ``phase`` of ``microbatch`` on ``node``: input ready at ``ready_s``, computed from
    ``start_s`` to ``end_s`` (seconds from the iteration's start)."""

    node: int
    microbatch: int
    phase: str
    ready_s: float
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class SimResult:
    """One simulated iteration. ``busy_s``, ``idle_s``, ``max_in_flight`` per node;
    ``stage_microbatches`` per stage; ``collisions`` (module docstring) and ``queued_s`` (seconds
    tasks waited after their input arrived, all tasks) over the iteration."""

    iteration_s: float
    intervals: tuple[Interval, ...]
    busy_s: tuple[float, ...]
    stage_microbatches: tuple[int, ...]
    node_microbatches: tuple[int, ...]
    max_in_flight: tuple[int, ...]
    collisions: int
    queued_s: float

    @property
    def idle_s(self) -> tuple[float, ...]:
        return tuple(self.iteration_s - b for b in self.busy_s)


@dataclass(frozen=True, slots=True)
class ModelledEnergy:
    """Joules of one simulated iteration at assumed watts: modelled, never measured."""

    joules: float
    busy_j: float
    idle_j: float
    node_j: tuple[float, ...]
    label: str = "modelled (simulated timeline × assumed watts)"


def _duration_s(topology: Topology, node: int, phase: str) -> float:
    if phase == "F":
        return topology.forward_s(node)
    if phase == "L":
        return topology.loss_s(node)
    return topology.backward_s(node)


def simulate(schedule: Schedule, topology: Topology, *, follow_order: bool = True) -> SimResult:
    """Simulate one iteration of ``schedule`` on ``topology`` (module docstring)."""
    if follow_order:
        intervals = _follow_orders(schedule, topology)
    else:
        intervals = _first_come_first_served(schedule, topology)
    return _result(schedule, topology, intervals)


def fifo_schedule(schedule: Schedule, topology: Topology) -> Schedule:
    """``schedule`` with the orders and release times of its first-come-first-served run, so
    that following them replays that run."""
    intervals = _first_come_first_served(schedule, topology)
    starts = {(i.microbatch, i.phase, i.node): i.start_s for i in intervals}
    mbs = tuple(
        replace(mb, release_s=starts[mb.id, "F", mb.data_node]) for mb in schedule.microbatches
    )
    order = order_from_starts(mbs, len(topology.nodes), starts)
    return replace(schedule, microbatches=mbs, order=order)


def _follow_orders(schedule: Schedule, topology: Topology) -> list[Interval]:
    steps = {mb.id: mb.steps() for mb in schedule.microbatches}
    position = {mb.id: 0 for mb in schedule.microbatches}  # next step of each microbatch
    arrival = {mb.id: mb.release_s for mb in schedule.microbatches}  # its input's arrival
    cursor = [0] * len(topology.nodes)  # next task of each node's order
    free = [0.0] * len(topology.nodes)
    intervals: list[Interval] = []
    pending = deque(range(len(topology.nodes)))
    total = sum(len(s) for s in steps.values())
    while pending:
        node = pending.popleft()
        order = schedule.order[node]
        while cursor[node] < len(order):
            task = order[cursor[node]]
            mb = task.microbatch
            if position[mb] >= len(steps[mb]) or steps[mb][position[mb]] != (node, task.phase):
                break  # its input is not there yet
            ready = arrival[mb]
            start = max(ready, free[node])
            end = start + _duration_s(topology, node, task.phase)
            intervals.append(Interval(node, mb, task.phase, ready, start, end))
            free[node] = end
            cursor[node] += 1
            position[mb] += 1
            if position[mb] < len(steps[mb]):
                nxt = steps[mb][position[mb]][0]
                arrival[mb] = end + topology.link_s(node, nxt)
                pending.append(nxt)  # it may have been waiting for this
    if len(intervals) != total:
        raise SimulationStuck(
            f"schedule {schedule.name!r}: nodes wait on each other after {len(intervals)} of "
            f"{total} tasks; check it with greenbench.planner.skippipe.schedule.validate"
        )
    return intervals


def _first_come_first_served(schedule: Schedule, topology: Topology) -> list[Interval]:
    n = len(topology.nodes)
    mbs = {mb.id: mb for mb in schedule.microbatches}
    steps = {i: mb.steps() for i, mb in mbs.items()}
    memory = topology.memory_microbatches
    held = [0] * n  # microbatches holding memory on each node
    queued: list[list[tuple[float, int, int, int]]] = [[] for _ in range(n)]  # arrived tasks
    launches = {d: sorted(i for i, mb in mbs.items() if mb.data_node == d) for d in range(n)}
    running = [False] * n
    events: list[tuple[float, int, int, int, int, int]] = []  # time, seq, kind, node, mb, step
    intervals: list[Interval] = []
    arrive, finish, wake = 0, 1, 2
    counter = itertools.count()

    def push(t: float, kind: int, node: int, mb: int = -1, k: int = -1) -> None:
        heapq.heappush(events, (t, next(counter), kind, node, mb, k))

    def start(node: int, now: float) -> None:
        if running[node]:
            return
        if queued[node]:  # work in flight first, oldest arrival first
            ready, _, mb, k = heapq.heappop(queued[node])
        else:  # then a new microbatch, if every node on its path can hold it
            mb = next(
                (
                    i
                    for i in launches[node]
                    if mbs[i].release_s <= now + _EPS
                    and all(held[x] < memory for x in mbs[i].nodes)
                ),
                -1,
            )
            if mb < 0:
                return
            launches[node].remove(mb)
            for x in mbs[mb].nodes:
                held[x] += 1
            ready, k = now, 0
        phase = steps[mb][k][1]
        begin = max(now, ready)  # events within _EPS of each other are handled together
        end = begin + _duration_s(topology, node, phase)
        intervals.append(Interval(node, mb, phase, ready, begin, end))
        running[node] = True
        push(end, finish, node, mb, k)

    for mb in mbs.values():
        push(mb.release_s, wake, mb.data_node)
    while events:
        now = events[0][0]
        while events and events[0][0] <= now + _EPS:
            t, _, kind, node, mb, k = heapq.heappop(events)
            if kind == finish:
                running[node] = False
                if steps[mb][k][1] == "B":
                    held[node] -= 1
                if k + 1 < len(steps[mb]):
                    nxt = steps[mb][k + 1][0]
                    push(t + topology.link_s(node, nxt), arrive, nxt, mb, k + 1)
            elif kind == arrive:
                heapq.heappush(queued[node], (t, PRIORITY[steps[mb][k][1]], mb, k))
        for node in range(n):
            start(node, now)
    if any(launches.values()) or any(queued):
        raise SimulationStuck(f"schedule {schedule.name!r}: first come first served got stuck")
    return intervals


def _result(schedule: Schedule, topology: Topology, intervals: list[Interval]) -> SimResult:
    n = len(topology.nodes)
    intervals.sort(key=lambda i: (i.node, i.start_s, PRIORITY[i.phase], i.microbatch))
    busy = [0.0] * n
    peak = [0] * n
    in_flight = [0] * n
    collisions, queued = 0, 0.0
    by_node: list[list[Interval]] = [[] for _ in range(n)]
    for iv in intervals:
        by_node[iv.node].append(iv)
    for node, ivs in enumerate(by_node):
        for iv in ivs:
            busy[node] += iv.end_s - iv.start_s
            in_flight[node] += {"F": 1, "L": 0, "B": -1}[iv.phase]
            peak[node] = max(peak[node], in_flight[node])
            queued += iv.start_s - iv.ready_s
            if iv.start_s > iv.ready_s + _EPS and any(
                o.microbatch != iv.microbatch and o.start_s < iv.ready_s - _EPS < o.end_s
                for o in ivs
            ):
                collisions += 1
    return SimResult(
        iteration_s=max((iv.end_s for iv in intervals), default=0.0),
        intervals=tuple(intervals),
        busy_s=tuple(busy),
        stage_microbatches=schedule.stage_visits(topology),
        node_microbatches=schedule.node_visits(n),
        max_in_flight=tuple(peak),
        collisions=collisions,
        queued_s=queued,
    )


def simulate_energy(
    result: SimResult, busy_w: float | Sequence[float], idle_w: float | Sequence[float]
) -> ModelledEnergy:
    """Modelled joules of ``result``: each node's busy seconds at ``busy_w`` and idle seconds at
    ``idle_w`` (one figure for every node, or one per node)."""
    n = len(result.busy_s)
    busy = [float(busy_w)] * n if isinstance(busy_w, int | float) else [float(w) for w in busy_w]
    idle = [float(idle_w)] * n if isinstance(idle_w, int | float) else [float(w) for w in idle_w]
    if len(busy) != n or len(idle) != n:
        raise ValueError(f"give one busy and one idle power per node ({n} nodes)")
    busy_j = [w * s for w, s in zip(busy, result.busy_s, strict=True)]
    idle_j = [w * s for w, s in zip(idle, result.idle_s, strict=True)]
    return ModelledEnergy(
        joules=sum(busy_j) + sum(idle_j),
        busy_j=sum(busy_j),
        idle_j=sum(idle_j),
        node_j=tuple(b + i for b, i in zip(busy_j, idle_j, strict=True)),
    )
