"""Which stages each microbatch visits, and through which nodes: the path half of SkipPipe's
scheduling, with no notion of time.

* `cheapest_path`: the path of least round trip (`Topology.round_trip_s`) through a given set
  of stages, over every allowed order of the set (`schedule.stage_orders`) and every choice of
  node per stage, by dynamic programming over the stages in order; nodes may be excluded
  (full ones).
* `balanced_sets`: a set of stages per microbatch such that every stage after stage 0 gets an
  even share of the visits. It starts from a cyclic deal (visit ``v`` goes to stage
  ``1 + v mod (S − 1)``, so counts differ by at most one) and only ever *exchanges* stages
  between two microbatches (a takes t and gives s, b takes s and gives t), which keeps every
  count. With ``rng`` the exchanges are random (random skip); without, it is hill climbing on
  the cheapest round trips — the slowest first, then their sum — until no exchange helps. This
  takes the place of the stage-share conflicts of SkipPipe's conflict-based search.
* `capped_paths`: every microbatch, in turn, takes its cheapest (or, with ``rng``, a random)
  path through its set among nodes with room left, each node taking at most its even share of
  its stage's visits (SkipPipe's memory conflicts, without time).
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Sequence

from greenbench.planner.skippipe.schedule import IterationShape, swaps
from greenbench.planner.skippipe.topology import Topology

StageSet = frozenset[int]


def orders_of(stages: StageSet, max_swaps: int) -> list[tuple[int, ...]]:
    """The allowed visiting orders of ``stages``: sorted, or within ``max_swaps`` adjacent
    swaps of sorted."""
    return [o for o in itertools.permutations(sorted(stages)) if allowed(o, max_swaps)]


def cheapest_path(
    topology: Topology,
    data_node: int,
    stages: StageSet,
    max_swaps: int,
    excluded: frozenset[int] = frozenset(),
) -> tuple[float, tuple[int, ...]] | None:
    """(round trip s, path) of the cheapest path from ``data_node`` through ``stages`` avoiding
    ``excluded`` nodes; None when every path crosses one."""
    best: tuple[float, tuple[int, ...]] | None = None
    for order in orders_of(stages, max_swaps):
        # dp[node] = (cost of both directions of hops and compute so far, path so far)
        layer = {data_node: (0.0, (data_node,))}
        for stage in order:
            nxt: dict[int, tuple[float, tuple[int, ...]]] = {}
            for node in topology.stage_nodes(stage):
                if node in excluded:
                    continue
                step = topology.forward_s(node) + topology.backward_s(node)
                options = [
                    (c + topology.link_s(p, node) + topology.link_s(node, p) + step, path)
                    for p, (c, path) in layer.items()
                ]
                if options:
                    c, path = min(options)
                    nxt[node] = (c, (*path, node))
            layer = nxt
        for _, path in layer.values():
            full = (*path, data_node)
            cost = topology.round_trip_s(full)
            if best is None or (cost, full) < best:
                best = (cost, full)
    return best


def _cyclic_sets(n_items: int, n_stages: int, stages_per_path: int) -> list[StageSet]:
    k, others = stages_per_path - 1, n_stages - 1
    return [frozenset(1 + (i * k + t) % others for t in range(k)) for i in range(n_items)]


def balanced_sets(
    topology: Topology,
    data_nodes: Sequence[int],
    shape: IterationShape,
    *,
    rng: random.Random | None = None,
) -> list[StageSet]:
    """One set of stages per microbatch (``data_nodes[i]`` is microbatch ``i``'s), evenly shared
    over the stages (module docstring)."""
    n = len(data_nodes)
    sets = _cyclic_sets(n, topology.n_stages, shape.stages_per_path)
    if shape.stages_per_path == topology.n_stages or n < 2:
        return sets
    if rng is not None:
        for _ in range(20 * n):
            a, b = rng.sample(range(n), 2)
            gives, takes = sorted(sets[a] - sets[b]), sorted(sets[b] - sets[a])
            if gives:
                s, t = rng.choice(gives), rng.choice(takes)
                sets[a] = sets[a] - {s} | {t}
                sets[b] = sets[b] - {t} | {s}
        return sets

    memo: dict[tuple[int, StageSet], float] = {}

    def cost(i: int, stages: StageSet) -> float:
        key = (data_nodes[i], stages)
        if key not in memo:
            found = cheapest_path(topology, data_nodes[i], stages, shape.max_swaps)
            memo[key] = math.inf if found is None else found[0]
        return memo[key]

    costs = [cost(i, s) for i, s in enumerate(sets)]
    improved = True
    while improved:
        improved = False
        for a in range(n):
            for b in range(a + 1, n):
                if data_nodes[a] == data_nodes[b]:
                    continue  # same costs: an exchange changes nothing
                for s in sorted(sets[a] - sets[b]):
                    for t in sorted(sets[b] - sets[a]):
                        new_a, new_b = sets[a] - {s} | {t}, sets[b] - {t} | {s}
                        ca, cb = cost(a, new_a), cost(b, new_b)
                        rest = max((c for i, c in enumerate(costs) if i not in (a, b)), default=0)
                        before = (max(rest, costs[a], costs[b]), costs[a] + costs[b])
                        after = (max(rest, ca, cb), ca + cb)
                        if after < before:
                            sets[a], sets[b], costs[a], costs[b] = new_a, new_b, ca, cb
                            improved = True
                            break
                    else:
                        continue
                    break
    return sets


def node_caps(topology: Topology, sets: Sequence[StageSet]) -> list[int]:
    """Each node's even share of its stage's visits (rounded up): the most microbatches
    `capped_paths` sends through it."""
    visits = Counter(s for stages in sets for s in stages)
    caps = [0] * len(topology.nodes)
    for stage in range(1, topology.n_stages):
        members = topology.stage_nodes(stage)
        for node in members:
            caps[node] = math.ceil(visits[stage] / len(members))
    return caps


def capped_paths(
    topology: Topology,
    data_nodes: Sequence[int],
    sets: Sequence[StageSet],
    shape: IterationShape,
    order: Sequence[int],
    *,
    rng: random.Random | None = None,
) -> list[tuple[int, ...]]:
    """A path per microbatch through its set, taken in ``order`` (module docstring)."""
    caps = node_caps(topology, sets)
    used: Counter[int] = Counter()
    paths: list[tuple[int, ...]] = [()] * len(sets)
    for i in order:
        full = frozenset(n for n in range(len(topology.nodes)) if used[n] >= caps[n] > 0)
        d = data_nodes[i]
        if rng is None:
            found = cheapest_path(topology, d, sets[i], shape.max_swaps, full)
            assert found is not None, "even shares always leave room on some node"
            path = found[1]
        else:
            stages = rng.choice(orders_of(sets[i], shape.max_swaps))
            middle = [
                rng.choice([n for n in topology.stage_nodes(s) if n not in full]) for s in stages
            ]
            path = (d, *middle, d)
        used.update(path[1:-1])
        paths[i] = path
    return paths


def allowed(stages: Sequence[int], max_swaps: int) -> bool:
    """Whether ``stages`` is an allowed visiting order."""
    s = swaps(stages)
    return s is not None and s <= max_swaps
