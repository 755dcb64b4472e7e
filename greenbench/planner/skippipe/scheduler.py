"""The four schedules SkipPipe compares, each a `Schedule` for a `Topology`, deterministic given
a seed.

Microbatch ``i`` belongs to data node ``data_nodes[i % D]`` (D data nodes): ids deal the
microbatches round-robin, so ids 0..D−1 are every data node's first.

* `full_pipeline` (DT-FM, GPipe): every microbatch visits every stage in order. The narrowest
  stage after stage 0 has ``P`` nodes, so there are ``P`` pipelines, pipeline ``p`` being node
  ``p`` of every stage; data node ``d`` feeds pipeline ``d mod P`` (with more data nodes than
  pipelines, two data nodes share one). Run first come, first served. With ``avoid_slow``, the
  straggler-aware baseline: a stage's slow nodes (slowdown above 1) are left out of the
  pipelines where the stage has a node that is not slow, so ``P`` is the narrowest stage's
  count of such nodes.
* `random_skip`: every microbatch a random set of stages (evenly shared: random exchanges from
  a balanced deal), a random allowed order, random nodes with room (each node its even share of
  its stage). Run first come, first served.
* `skippipe_without_ca`: SkipPipe's paths without collision avoidance: balanced stage sets
  chosen for the cheapest round trips, then each microbatch the cheapest path through its set
  among nodes with room, each planned alone. Run first come, first served: microbatches that
  meet on a node queue.
* `skippipe`: the same stage sets, then collision avoidance (`planner`): each microbatch, in a
  priority order, takes the path and timing that finish it first given those planned before it
  (no-wait: it never queues at a node once started; or wait: each task in its node's earliest
  free gap). Several priority orders are planned, each both ways (the slowest data node's
  microbatches first; each round's slowest data node first; by id; seeded shuffles within a
  round), and the simulator ranks them.

"First come, first served" is the simulator's unplanned run (`simulator.fifo_schedule`); its
orders become the schedule's, so every builder hands a runner the same thing: paths and a
per-node order.

Why our own: no kept library schedules skip paths (module `schedule`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from greenbench.planner.skippipe.paths import balanced_sets, capped_paths, cheapest_path
from greenbench.planner.skippipe.planner import Reservations, plan_microbatch, timeline
from greenbench.planner.skippipe.schedule import (
    IterationShape,
    Microbatch,
    Schedule,
    order_from_starts,
)
from greenbench.planner.skippipe.simulator import fifo_schedule, simulate
from greenbench.planner.skippipe.topology import Topology


def owners(topology: Topology, microbatches_per_data_node: int) -> list[int]:
    """The data node of every microbatch id (module docstring)."""
    data = topology.data_nodes
    return [data[i % len(data)] for i in range(len(data) * microbatches_per_data_node)]


def full_shape(topology: Topology, microbatches_per_data_node: int) -> IterationShape:
    """The shape a full pipeline keeps: every stage, in order."""
    return IterationShape(microbatches_per_data_node, topology.n_stages, max_swaps=0)


def _unplanned(name: str, topology: Topology, paths: Sequence[tuple[int, ...]]) -> Schedule:
    mbs = tuple(Microbatch(i, tuple(p)) for i, p in enumerate(paths))
    draft = Schedule(name, mbs, tuple(() for _ in topology.nodes))
    return fifo_schedule(draft, topology)


def full_pipeline(
    topology: Topology,
    microbatches_per_data_node: int,
    *,
    microbatches_per_pipeline: int | None = None,
    avoid_slow: bool = False,
) -> Schedule:
    """Every microbatch through every stage in order, on fixed pipelines (module docstring).
    With ``microbatches_per_pipeline``, only the first ``P`` data nodes feed, that many each,
    as SkipPipe's simulator ran its baseline (3 × 9 = 27 microbatches in the published run).
    With ``avoid_slow``, the pipelines leave out slow nodes wherever their stage has another."""
    data = topology.data_nodes
    rest = [topology.stage_nodes(s) for s in range(1, topology.n_stages)]
    if avoid_slow:
        rest = [
            [n for n in members if topology.nodes[n].slowdown <= 1.0] or members for members in rest
        ]
    pipelines = min(len(members) for members in rest)
    if microbatches_per_pipeline is None:
        heads = owners(topology, microbatches_per_data_node)
    else:
        heads = [data[i % pipelines] for i in range(pipelines * microbatches_per_pipeline)]
    paths = [(d, *(members[data.index(d) % pipelines] for members in rest), d) for d in heads]
    name = "straggler-aware full pipeline" if avoid_slow else "full pipeline"
    return _unplanned(name, topology, paths)


def random_skip(topology: Topology, shape: IterationShape, *, seed: int = 0) -> Schedule:
    """Random evenly shared stage sets, orders and nodes (module docstring)."""
    rng = random.Random(seed)
    data = owners(topology, shape.microbatches_per_data_node)
    sets = balanced_sets(topology, data, shape, rng=rng)
    paths = capped_paths(topology, data, sets, shape, range(len(data)), rng=rng)
    return _unplanned("random skip", topology, paths)


def skippipe_without_ca(topology: Topology, shape: IterationShape) -> Schedule:
    """SkipPipe's cheapest paths, each planned alone, run unplanned (module docstring)."""
    data = owners(topology, shape.microbatches_per_data_node)
    sets = balanced_sets(topology, data, shape)
    paths = capped_paths(topology, data, sets, shape, range(len(data)))
    return _unplanned("SkipPipe without collision avoidance", topology, paths)


def priority_orders(
    topology: Topology,
    data: Sequence[int],
    sets: Sequence[frozenset[int]],
    shape: IterationShape,
    *,
    seed: int,
    tries: int,
) -> list[list[int]]:
    """The priority orders `skippipe` plans (module docstring), ``tries`` of them."""
    d_count = len(topology.data_nodes)
    rounds = [list(range(r, min(r + d_count, len(data)))) for r in range(0, len(data), d_count)]
    trip = [0.0] * d_count  # each data node's slowest cheapest round trip
    for i, stages in enumerate(sets):
        found = cheapest_path(topology, data[i], stages, shape.max_swaps)
        trip[i % d_count] = max(trip[i % d_count], found[0] if found else 0.0)
    slowest = sorted(range(d_count), key=lambda k: (-trip[k], k))
    orders = [
        [i for k in slowest for i in range(k, len(data), d_count)],
        [i for r in rounds for i in sorted(r, key=lambda i: slowest.index(i % d_count))],
        [i for r in rounds for i in r],
    ]
    rng = random.Random(seed)
    while len(orders) < tries:
        orders.append([i for r in rounds for i in rng.sample(r, len(r))])
    return orders[:tries]


def skippipe(
    topology: Topology, shape: IterationShape, *, seed: int = 0, tries: int = 8
) -> Schedule:
    """SkipPipe with collision avoidance: the best of ``tries`` planned timetables, ranked by
    the simulator (module docstring)."""
    data = owners(topology, shape.microbatches_per_data_node)
    sets = balanced_sets(topology, data, shape)
    best: tuple[float, Schedule] | None = None
    for order in priority_orders(topology, data, sets, shape, seed=seed, tries=tries):
        for wait in (False, True):
            schedule = plan(topology, data, sets, shape, order, wait=wait)
            t = simulate(schedule, topology).iteration_s
            if best is None or t < best[0] - 1e-9:
                best = (t, schedule)
    assert best is not None
    return best[1]


def plan(
    topology: Topology,
    data: Sequence[int],
    sets: Sequence[frozenset[int]],
    shape: IterationShape,
    order: Sequence[int],
    *,
    wait: bool = True,
) -> Schedule:
    """The timetable of microbatches planned in ``order`` (`planner`)."""
    reservations = Reservations(len(topology.nodes), topology.memory_microbatches)
    placed = {}
    for i in order:
        placement = plan_microbatch(
            topology, reservations, data[i], sets[i], shape.max_swaps, wait=wait
        )
        reservations.reserve(timeline(topology, placement.path), placement.times)
        placed[i] = placement
    mbs = tuple(Microbatch(i, placed[i].path, placed[i].start_s) for i in range(len(data)))
    starts = {
        (i, s.phase, s.node): t
        for i in range(len(data))
        for s, t in zip(timeline(topology, placed[i].path), placed[i].times, strict=True)
    }
    return Schedule(
        "SkipPipe",
        mbs,
        order_from_starts(mbs, len(topology.nodes), starts),
        planned_s=max(p.end_s for p in placed.values()),
    )


#: the four schedules of SkipPipe's comparison, by name
BUILDERS: dict[str, Callable[[Topology, IterationShape, int], Schedule]] = {
    "full pipeline": lambda t, s, seed: full_pipeline(t, s.microbatches_per_data_node),
    "random skip": lambda t, s, seed: random_skip(t, s, seed=seed),
    "SkipPipe without collision avoidance": lambda t, s, seed: skippipe_without_ca(t, s),
    "SkipPipe": lambda t, s, seed: skippipe(t, s, seed=seed),
}
