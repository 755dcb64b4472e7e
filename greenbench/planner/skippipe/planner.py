"""Collision avoidance: a timetable planned ahead, in which no two microbatches ever meet on a
node unplanned.

Microbatches are planned one after another (prioritized planning; Silver, "Cooperative
Pathfinding", AIIDE 2005), each into a reservation table of what the ones before it hold:

* ``busy``: the intervals each node computes;
* ``held``: the windows each node holds a microbatch in memory, at most M at any instant. A
  window runs from the microbatch's start on its data node to the end of its backward on the
  node, as in the simulator's unplanned run (whose data nodes reserve memory along the whole path
  when they start a microbatch): both count memory alike.

A microbatch's steps follow its path (`timeline`). Two ways to fit them in (`Reservations.starts`):

* *no-wait*: once started, every step starts the moment its input arrives, so the microbatch
  never queues at a node; the only freedom is when it starts (the first start at which every
  step finds its node free);
* *wait*: every step starts as early as its node is free after its input arrives (the earliest
  gap in the node's reservations), so a microbatch may wait at a node for a slot planned for it.

Either way it also waits to start until every node of its path has memory for it throughout.

The path is found by a time-aware A* (`plan_microbatch`) over partial paths through the
microbatch's stages (every allowed order, one node per stage). A partial path is priced at its
earliest start plus its round trip so far plus the cheapest completion, ignoring other
microbatches: a lower bound. A complete path is priced exactly, by fitting it into the
reservation table, and pushed back; the first complete path popped finishes first.

SkipPipe's low-level search is a time-aware A* too. Where SkipPipe resolves collisions between
microbatches by conflict-based search (branching on which one yields), we let earlier
microbatches keep their slots and later ones find others, and plan a few priority orders
(`scheduler.skippipe`): a heuristic, checked against exhaustive search on small instances
(``tests/planner/test_skippipe_scheduler.py``).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from greenbench.planner.skippipe.paths import StageSet, orders_of
from greenbench.planner.skippipe.schedule import Microbatch
from greenbench.planner.skippipe.topology import Topology

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Step:
    """A task of a microbatch: ``phase`` on ``node`` for ``duration_s``, then ``hop_s`` to the
    next task's node; ``offset_s`` from the microbatch's start if it never waits."""

    node: int
    phase: str
    duration_s: float
    hop_s: float
    offset_s: float


def timeline(topology: Topology, path: tuple[int, ...]) -> list[Step]:
    """The tasks of a microbatch on ``path``, in order, at their no-wait offsets."""
    tasks = Microbatch(0, path).steps()
    cost = {"F": topology.forward_s, "L": topology.loss_s, "B": topology.backward_s}
    out, t = [], 0.0
    for k, (node, phase) in enumerate(tasks):
        d = cost[phase](node)
        hop = topology.link_s(node, tasks[k + 1][0]) if k + 1 < len(tasks) else 0.0
        out.append(Step(node, phase, d, hop, t))
        t += d + hop
    return out


@dataclass
class Reservations:
    """What planned microbatches hold: compute intervals and memory windows per node."""

    n_nodes: int
    memory: int
    busy: list[list[tuple[float, float]]] = field(default_factory=list)
    held: list[list[tuple[float, float]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.busy = [[] for _ in range(self.n_nodes)]
        self.held = [[] for _ in range(self.n_nodes)]

    def _gap(self, node: int, ready: float, duration: float) -> float:
        """The earliest start ≥ ``ready`` at which ``node`` is free for ``duration``."""
        busy, t = self.busy[node], ready
        # intervals never overlap, so ends are sorted as starts are: skip those ended by ready
        for bs, be in busy[max(0, bisect.bisect_right(busy, (ready,)) - 1) :]:
            if be <= t + _EPS:
                continue
            if bs >= t + duration - _EPS:
                break
            t = be
        return t

    def _memory_free_from(self, node: int, start: float, end: float) -> float | None:
        """None when ``node`` can hold one more microbatch over ``[start, end)``; else the
        first instant from which a window starting then could get past the full stretch."""
        windows = [(ws, we) for ws, we in self.held[node] if ws < end and we > start + _EPS]
        if len(windows) < self.memory:
            return None
        for p in sorted({start, *(q for w in windows for q in w if start < q < end)}):
            holding = sorted(we for ws, we in windows if ws <= p + _EPS and we > p + _EPS)
            if len(holding) >= self.memory:
                return holding[len(holding) - self.memory]  # enough of them have ended
        return None

    def starts(self, steps: Sequence[Step], not_before: float, *, wait: bool) -> list[float]:
        """The start of every step of a microbatch started no earlier than ``not_before``
        (module docstring: ``wait`` or no-wait, memory along the path)."""
        launch = not_before
        while True:
            times: list[float] = []
            bump = launch
            for k, s in enumerate(steps):
                if wait:
                    prev = steps[k - 1] if k else None
                    ready = times[-1] + prev.duration_s + prev.hop_s if prev else launch
                    times.append(self._gap(s.node, ready, s.duration_s))
                else:
                    t = launch + s.offset_s
                    times.append(t)
                    bump = max(bump, self._gap(s.node, t, s.duration_s) - s.offset_s)
            if bump > launch + _EPS:
                launch = bump
                continue
            launch = times[0]
            blocked = [
                self._memory_free_from(s.node, launch, t + s.duration_s)
                for s, t in zip(steps, times, strict=True)
                if s.phase == "B"
            ]
            later = max((b for b in blocked if b is not None), default=None)
            if later is None:
                return times
            launch = later

    def reserve(self, steps: Sequence[Step], times: Sequence[float]) -> None:
        """Hold what a microbatch whose steps start at ``times`` takes."""
        for s, t in zip(steps, times, strict=True):
            bisect.insort(self.busy[s.node], (t, t + s.duration_s))
            if s.phase == "B":  # memory held from the microbatch's start to here
                self.held[s.node].append((times[0], t + s.duration_s))


@dataclass(frozen=True, slots=True)
class Placement:
    """A planned microbatch: its ``path``, the start of each step, and its end (seconds)."""

    path: tuple[int, ...]
    times: tuple[float, ...]
    end_s: float

    @property
    def start_s(self) -> float:
        return self.times[0]


def plan_microbatch(
    topology: Topology,
    reservations: Reservations,
    data_node: int,
    stages: StageSet,
    max_swaps: int,
    *,
    wait: bool = True,
    not_before: float = 0.0,
) -> Placement:
    """The path through ``stages`` (any allowed order) on which a microbatch from
    ``data_node`` finishes first, given ``reservations`` (module docstring)."""
    d = data_node
    base = topology.forward_s(d) + topology.backward_s(d) + topology.loss_s(d)

    def hop(a: int, b: int) -> float:
        return topology.link_s(a, b) + topology.link_s(b, a)

    def step(node: int) -> float:
        return topology.forward_s(node) + topology.backward_s(node)

    # rest[order][i][prev]: the cheapest rest of a round trip, positions i.. of `order` after
    # node `prev`, and home
    rest: dict[tuple[int, ...], list[dict[int, float]]] = {}
    for order in orders_of(stages, max_swaps):
        prevs = [d, *(n for s in order for n in topology.stage_nodes(s))]
        table = [{p: hop(p, d) for p in prevs}]
        for stage in reversed(order):
            here, after = topology.stage_nodes(stage), table[0]
            table.insert(0, {p: min(hop(p, n) + step(n) + after[n] for n in here) for p in prevs})
        rest[order] = table

    # heap items: (bound, or the exact end once priced; tie; order; nodes so far; cost so far;
    # step starts once priced)
    Item = tuple[float, int, tuple[int, ...], tuple[int, ...], float, tuple[float, ...] | None]
    counter = itertools.count()
    heap: list[Item] = []
    for order, table in rest.items():
        heapq.heappush(
            heap, (not_before + base + table[0][d], next(counter), order, (d,), 0.0, None)
        )
    while heap:
        f, _, order, nodes, so_far, times = heapq.heappop(heap)
        if times is not None:
            return Placement((*nodes, d), times, f)
        i = len(nodes) - 1
        if i == len(order):
            steps = timeline(topology, (*nodes, d))
            priced = tuple(reservations.starts(steps, not_before, wait=wait))
            end = priced[-1] + steps[-1].duration_s
            heapq.heappush(heap, (end, next(counter), order, nodes, so_far, priced))
            continue
        for n in topology.stage_nodes(order[i]):
            cost = so_far + hop(nodes[-1], n) + step(n)
            bound = not_before + base + cost + rest[order][i + 1][n]
            heapq.heappush(heap, (bound, next(counter), order, (*nodes, n), cost, None))
    raise ValueError(f"no allowed order of stages {sorted(stages)}")
