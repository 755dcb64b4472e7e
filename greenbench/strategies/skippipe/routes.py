"""A SkipPipe run's plans: stages' layers, and each iteration's paths and task order.

The paths come from the scheduler in `greenbench.plan.skippipe` when it offers one for the
run's nodes; `even_paths` is the fallback this module makes itself: every microbatch visits
``round((S−1)·(1−skip))`` of the ``S−1`` stages of blocks, in stage order, the subsets taken in
turn so every stage gets an even share, and a stage's visits go to its nodes in turn.
``schedule = "full"`` (or ``skip = 0``) is a full pipeline: every stage, GPipe order.
"""

from __future__ import annotations

import itertools

from greenbench.strategies.skippipe.plan import Plan, fill_drain_order


def stage_layers(layers: int, stages: int) -> list[tuple[int, int]]:
    """Blocks ``[lo, hi)`` of each stage of blocks (earlier stages take the remainder)."""
    base, extra = divmod(layers, stages)
    out, lo = [], 0
    for s in range(stages):
        hi = lo + base + (1 if s < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def nodes_by_stage(counts: tuple[int, ...], removed: set[int]) -> tuple[tuple[int, ...], ...]:
    """Each stage's serving nodes (ranks numbered stage by stage), less ``removed``."""
    out, first = [], 0
    for count in counts:
        out.append(tuple(n for n in range(first, first + count) if n not in removed))
        first += count
    return tuple(out)


def even_paths(
    stage_nodes: tuple[tuple[int, ...], ...], microbatches: int, skip: float
) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """(paths, data node per microbatch) as the module docstring says."""
    block_stages = list(range(1, len(stage_nodes)))
    visit = max(1, round(len(block_stages) * (1 - skip)))
    subsets = list(itertools.combinations(block_stages, visit))
    turn = {s: 0 for s in block_stages}
    paths, data = [], []
    data_nodes = stage_nodes[0]
    for m in range(microbatches):
        stages = subsets[m % len(subsets)]
        path = []
        for s in stages:
            nodes = stage_nodes[s]
            path.append(nodes[turn[s] % len(nodes)])
            turn[s] += 1
        paths.append(tuple(path))
        data.append(data_nodes[m % len(data_nodes)])
    return tuple(paths), tuple(data)


def make_plan(
    counts: tuple[int, ...],
    *,
    microbatches: int,
    skip: float,
    schedule: str,
    seed: int,
    removed: set[int],
) -> Plan:
    """One iteration's plan for nodes ``counts`` per stage without ``removed``."""
    stage_nodes = nodes_by_stage(counts, removed)
    if any(not nodes for nodes in stage_nodes):
        raise RuntimeError("a stage has no serving node left: its layers cannot be skipped by all")
    paths, data = even_paths(stage_nodes, microbatches, 0.0 if schedule == "full" else skip)
    del seed
    return fill_drain_order(stage_nodes, paths, data)
