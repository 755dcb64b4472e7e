"""The four schedules: SkipPipe's rules hold, memory holds in the simulated timeline, they are
deterministic, collision avoidance leaves no collision and is replayed exactly; the time-aware
A* against brute force; the heuristic against exhaustive search on small instances; and the
published ordering at 20 nodes / 6 stages / 33 % skip."""

from __future__ import annotations

import itertools

import pytest

from greenbench.planner.skippipe.network import Network
from greenbench.planner.skippipe.paths import orders_of
from greenbench.planner.skippipe.planner import Reservations, plan_microbatch, timeline
from greenbench.planner.skippipe.schedule import IterationShape, Microbatch, Schedule, violations
from greenbench.planner.skippipe.scheduler import (
    BUILDERS,
    full_pipeline,
    full_shape,
    owners,
    plan,
    skippipe,
)
from greenbench.planner.skippipe.simulator import fifo_schedule, simulate
from greenbench.planner.skippipe.topology import (
    Topology,
    build_topology,
    published_topology,
    small_topology,
)

SHAPE_20 = IterationShape.from_skip_ratio(6, 1 / 3, 6)


def two_regions() -> Topology:
    """Data nodes 0 (A) and 1 (B), stage 1 on 2 (A) and 3 (B), stage 2 on 4 (A) and 5 (B); A–B
    hops are slow (40 ms, 0.05 GiB/s for 16 MiB)."""
    net = Network(("A", "B"), ((1.0, 40.0), (40.0, 1.0)), ((2.0, 0.05), (0.05, 2.0)))
    return build_topology(
        ["A", "B", "A", "B", "A", "B"], [0, 0, 1, 1, 2, 2], net,
        layers_per_stage=2, samples_per_microbatch=1, activation_bytes_per_sample=1 << 24,
        compute_s_per_sample_layer=0.05, hop_overhead_s=0.05, memory_microbatches=2,
    )  # fmt: skip


SMALL_CASES = [
    (small_topology(), IterationShape.from_skip_ratio(3, 1 / 3, 4)),
    (small_topology(slowdown=[1, 1, 3, 1]), IterationShape.from_skip_ratio(3, 1 / 3, 4)),
    (small_topology(), IterationShape.from_skip_ratio(3, 0.0, 3)),
    (small_topology(slowdown=[1, 1, 3, 1]), IterationShape.from_skip_ratio(3, 0.0, 3)),
    (two_regions(), IterationShape.from_skip_ratio(3, 1 / 3, 2)),
    (two_regions(), IterationShape.from_skip_ratio(3, 0.0, 1)),
]


def rules(name: str, topology: Topology, shape: IterationShape) -> IterationShape:
    return full_shape(topology, shape.microbatches_per_data_node) if name == "full pipeline" else (
        shape)  # fmt: skip


@pytest.fixture(scope="module")
def published() -> tuple[Topology, dict[str, Schedule]]:
    t = published_topology()
    return t, {name: build(t, SHAPE_20, 0) for name, build in BUILDERS.items()}


@pytest.mark.parametrize(("topology", "shape"), SMALL_CASES[:3])
@pytest.mark.parametrize("name", list(BUILDERS))
def test_small_schedules_keep_the_rules(name, topology, shape) -> None:
    s = BUILDERS[name](topology, shape, 0)
    assert violations(s, topology, rules(name, topology, shape)) == []
    r = simulate(s, topology)
    assert max(r.max_in_flight) <= topology.memory_microbatches
    assert BUILDERS[name](topology, shape, 0) == s  # deterministic


@pytest.mark.parametrize("name", list(BUILDERS))
def test_published_schedules_keep_the_rules(published, name) -> None:
    t, schedules = published
    s = schedules[name]
    assert violations(s, t, rules(name, t, SHAPE_20)) == []
    r = simulate(s, t)
    assert max(r.max_in_flight) <= t.memory_microbatches
    visits = r.stage_microbatches
    assert visits[0] == 30 and len(set(visits[1:])) == 1  # an even share per stage
    for node in range(len(t.nodes)):  # one thing at a time on every node
        ivs = sorted((iv for iv in r.intervals if iv.node == node), key=lambda iv: iv.start_s)
        assert all(a.end_s <= b.start_s + 1e-9 for a, b in itertools.pairwise(ivs))


def test_random_skip_depends_on_its_seed_only() -> None:
    t, shape = SMALL_CASES[0]
    a, b = BUILDERS["random skip"](t, shape, 1), BUILDERS["random skip"](t, shape, 1)
    assert a == b
    t20 = published_topology()
    seeds = {BUILDERS["random skip"](t20, SHAPE_20, s).microbatches for s in range(3)}
    assert len(seeds) == 3


def test_collision_avoidance_leaves_no_collision_and_is_replayed_exactly(published) -> None:
    t, schedules = published
    s = schedules["SkipPipe"]
    r = simulate(s, t)
    assert r.collisions == 0 and r.queued_s == pytest.approx(0.0, abs=1e-6)
    assert s.planned_s == pytest.approx(r.iteration_s)
    unaware = simulate(schedules["SkipPipe without collision avoidance"], t)
    assert unaware.collisions > 0


@pytest.mark.parametrize("wait", [False, True])
def test_planned_timetables_are_replayed_exactly(wait) -> None:
    for t, shape in SMALL_CASES:
        data = owners(t, shape.microbatches_per_data_node)
        sets = [frozenset(range(1, t.n_stages))] * len(data)
        if shape.stages_per_path < t.n_stages:
            sets = [frozenset({1 + i % 2}) for i in range(len(data))]
        s = plan(t, data, sets, shape, range(len(data)), wait=wait)
        assert violations(s, t, shape) == []
        r = simulate(s, t)
        assert r.iteration_s == pytest.approx(s.planned_s)
        if not wait:
            assert r.collisions == 0


def test_time_aware_a_star_finds_the_earliest_finish() -> None:
    t = published_topology()
    reservations = Reservations(len(t.nodes), t.memory_microbatches)
    # fill the table with a first plan, then ask for one more microbatch from each data node
    first = plan(t, owners(t, 2), [frozenset({1, 2, 3})] * 10, SHAPE_20, range(10))
    for mb in first.microbatches:
        steps = timeline(t, mb.path)
        r = simulate(first, t)
        starts = {(iv.phase, iv.node): iv.start_s for iv in r.intervals if iv.microbatch == mb.id}
        reservations.reserve(steps, [starts[s.phase, s.node] for s in steps])
    for d in t.data_nodes:
        for wait in (False, True):
            for stages in (frozenset({1, 2, 3}), frozenset({2, 4, 5})):
                found = plan_microbatch(t, reservations, d, stages, 1, wait=wait)
                brute = min(
                    reservations.starts(timeline(t, p), 0.0, wait=wait)[-1]
                    + timeline(t, p)[-1].duration_s
                    for order in orders_of(stages, 1)
                    for p in ((d, *n, d) for n in itertools.product(
                        *(t.stage_nodes(s) for s in order)))
                )  # fmt: skip
                assert found.end_s == pytest.approx(brute)


def exhaustive_best(t: Topology, shape: IterationShape) -> float:
    """The shortest iteration over every valid assignment of paths to microbatches, each run
    first come first served and planned in every priority order, either way."""
    data = owners(t, shape.microbatches_per_data_node)
    options = []
    for d in data:
        paths = []
        for combo in itertools.combinations(range(1, t.n_stages), shape.stages_per_path - 1):
            for order in orders_of(frozenset(combo), shape.max_swaps):
                paths += [(d, *n, d) for n in itertools.product(*map(t.stage_nodes, order))]
        options.append(paths)
    best = float("inf")
    for combo in itertools.product(*options):
        draft = Schedule("x", tuple(Microbatch(i, p) for i, p in enumerate(combo)),
                         tuple(() for _ in t.nodes))  # fmt: skip
        visits = draft.stage_visits(t)[1:]
        if max(visits) - min(visits) > 1:
            continue
        best = min(best, simulate(fifo_schedule(draft, t), t).iteration_s)
        sets = [frozenset(t.stage_of(x) for x in p[1:-1]) for p in combo]
        for priority in itertools.permutations(range(len(data))):
            for wait in (False, True):
                s = plan(t, data, sets, shape, priority, wait=wait)
                best = min(best, simulate(s, t).iteration_s)
    return best


@pytest.mark.parametrize(("topology", "shape"), SMALL_CASES)
def test_the_heuristic_matches_exhaustive_search_on_small_instances(topology, shape) -> None:
    found = simulate(skippipe(topology, shape), topology).iteration_s
    assert found <= exhaustive_best(topology, shape) * (1 + 1e-9)


def test_published_ordering_and_ratio(published) -> None:
    t, schedules = published
    times = [simulate(schedules[name], t).iteration_s for name in BUILDERS]
    assert all(a > b for a, b in itertools.pairwise(times)), times
    assert times[-1] <= 0.45 * times[0], times
    # SkipPipe's own baseline run (3 pipeline heads × 9 microbatches), published 79.94 s
    baseline = full_pipeline(t, 6, microbatches_per_pipeline=9)
    assert simulate(baseline, t).iteration_s == pytest.approx(79.94, rel=0.01)


def test_ordering_holds_on_an_allocation_tuned_for_the_full_pipeline() -> None:
    t = published_topology(allocation="tuned")
    times = [simulate(build(t, SHAPE_20, 0), t).iteration_s for build in BUILDERS.values()]
    assert all(a > b for a, b in itertools.pairwise(times)), times
    assert times[-1] <= 0.45 * times[0], times
