"""A SkipPipe run's plans: the stages' layers, and each iteration's paths and task order.

The paths and each node's order come from the scheduler in `greenbench.planner.skippipe`, on a
`Topology` of the run's own nodes: one host (every link at the emulated latency and bandwidth),
each node's compute time per sample and layer (an estimate from the model's FLOPs at an assumed
rate: the scheduler needs only the ratio of compute to link time, and the straggler's factor,
which is exact), SkipPipe's memory cap of three microbatches in flight per node.
The data node holds no blocks: its cost is its embedding and head. ``random`` takes random
stage subsets, ``skippipe`` the scheduler's own plan (collision-free, cost-aware: it routes
around a slow node). ``schedule = "full"`` is the baseline, a full pipeline in GPipe order:
`even_paths` with no skip (every microbatch through every stage, a stage's replicas taking
microbatches in turn) and fill-drain order on every node. ``schedule = "full-aware"`` is the
straggler-aware baseline: the same full pipeline and order, but a stage's microbatches go only to
its replicas that are not stragglers (`aware_paths`; a stage whose every replica is slow keeps
them all), so the comparison with SkipPipe is not against a pipeline that keeps feeding the
straggler. A node that stopped serving is left out.

The same topology and plans serve the simulated mode (``skippipe.mode = "simulate"``,
`greenbench.launcher.runners.simulated`): `run_costs` prices a run's nodes from its settings'
sections, `local_topology` builds their `Topology`, and `as_schedule` turns the runner's plan
back into the simulator's `Schedule`, so what is simulated is what the runner would execute.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from greenbench.planner.skippipe import scheduler
from greenbench.planner.skippipe.network import uniform_network
from greenbench.planner.skippipe.schedule import (
    IterationShape,
    Microbatch,
    Schedule,
    Task,
    runner_order,
)
from greenbench.planner.skippipe.topology import Topology, build_topology
from greenbench.strategies.skippipe.plan import Plan, fill_drain_order
from greenbench.strategies.skippipe.settings import FULL_SCHEDULES

if TYPE_CHECKING:
    from greenbench.data.settings import DataSettings
    from greenbench.models import ModelInfo
    from greenbench.strategies.skippipe.settings import SkipPipeSettings

#: the compute rate the plan assumes for one node (FLOP/s): it sets only the ratio of compute to
#: the emulated links, not any measured figure
PLANNING_FLOPS = 2e10
MEMORY_MICROBATCHES = 3  # SkipPipe's cap on microbatches in flight per node


@dataclass(frozen=True, slots=True)
class Costs:
    """What the scheduler weighs: per-node slowdown, the links, one microbatch's size."""

    layers_per_stage: int
    forward_flops_per_sample_layer: float
    data_node_flops_per_sample: float  # embedding and head (the data node holds no blocks)
    activation_bytes_per_sample: int
    samples_per_microbatch: int
    latency_ms: float
    bandwidth_gbps: float  # 0: unlimited
    slowdown: dict[int, float]


def run_costs(
    skippipe: SkipPipeSettings, data: DataSettings, info: ModelInfo, layers: int
) -> Costs:
    """What the scheduler weighs for a run of these SkipPipe and data settings on a model of
    ``layers`` blocks (``info``): per-layer forward FLOPs and the data node's embedding and head
    at the run's sequence length, fp32 activations, the emulated links, the slow nodes'
    factor."""
    from greenbench.models.flops import flops_per_token

    seq_len = data.seq_len
    counts = [int(p) for p in str(skippipe.stages).split("-") if p.strip()]
    slow = {int(p) for p in str(skippipe.slow_nodes).split("-") if p.strip()}
    bounds = stage_layers(layers, len(counts) - 1)
    per_layer = flops_per_token(info, seq_len) / 3 / layers  # forward, one block
    return Costs(
        layers_per_stage=max(hi - lo for lo, hi in bounds),
        forward_flops_per_sample_layer=per_layer * seq_len,
        data_node_flops_per_sample=2 * info.d_model * info.vocab_size * seq_len,
        activation_bytes_per_sample=seq_len * info.d_model * 4,
        samples_per_microbatch=data.micro_batch,
        latency_ms=float(skippipe.link_latency_ms),
        bandwidth_gbps=skippipe.link_bandwidth_gbps,
        slowdown={n: float(skippipe.slowdown) for n in slow},
    )


def local_topology(
    stage_nodes: tuple[tuple[int, ...], ...], costs: Costs
) -> tuple[Topology, tuple[int, ...]]:
    """The `Topology` of a run's serving nodes on one host (module docstring), and the rank of
    each of its nodes (topology index → rank)."""
    ranks = tuple(n for nodes in stage_nodes for n in nodes)
    stages = [s for s, nodes in enumerate(stage_nodes) for _ in nodes]
    bandwidth = costs.bandwidth_gbps * 1e9 / 8 / 2**30 if costs.bandwidth_gbps > 0 else 1e6
    topology = build_topology(
        ["local"] * len(ranks),
        stages,
        uniform_network(("local",), latency_ms=costs.latency_ms, bandwidth_gib_s=bandwidth),
        layers_per_stage=costs.layers_per_stage,
        samples_per_microbatch=costs.samples_per_microbatch,
        activation_bytes_per_sample=costs.activation_bytes_per_sample,
        compute_s_per_sample_layer=[
            (
                costs.data_node_flops_per_sample / costs.layers_per_stage
                if stage == 0
                else costs.forward_flops_per_sample_layer
            )
            / PLANNING_FLOPS
            for stage in stages
        ],
        slowdown=[costs.slowdown.get(r, 1.0) for r in ranks],
        memory_microbatches=MEMORY_MICROBATCHES,
    )
    return topology, ranks


def as_schedule(plan: Plan, ranks: tuple[int, ...], name: str) -> Schedule:
    """``plan`` as the simulator's `Schedule` on the topology whose node ``i`` is rank
    ``ranks[i]`` (`local_topology`): the same paths, every node's tasks in the runner's order
    (``E``, ``L``, ``G`` on a data node are its ``F``, ``L``, ``B``), no release times (the
    runner starts a microbatch when its data node's order reaches it)."""
    index = {rank: i for i, rank in enumerate(ranks)}
    phase = {"E": "F", "G": "B", "F": "F", "L": "L", "B": "B"}
    mbs = tuple(
        Microbatch(m, tuple(index[n] for n in plan.route(m))) for m in range(len(plan.paths))
    )
    order = tuple(
        tuple(Task(m, phase[kind]) for kind, m in plan.order.get(rank, ())) for rank in ranks
    )
    return Schedule(name, mbs, order)


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
    """(paths, data node per microbatch) of the plain plan (module docstring)."""
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


def aware_paths(
    stage_nodes: tuple[tuple[int, ...], ...], microbatches: int, slow: set[int]
) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """(paths, data node per microbatch) of the straggler-aware full pipeline: every stage,
    each stage's healthy replicas (those not in ``slow``) in turn; a stage with no healthy
    replica keeps all of its own."""
    healthy = tuple(
        tuple(n for n in nodes if n not in slow) or nodes if s else nodes
        for s, nodes in enumerate(stage_nodes)
    )
    return even_paths(healthy, microbatches, 0.0)


def make_plan(
    counts: tuple[int, ...],
    *,
    microbatches: int,
    skip: float,
    schedule: str,
    seed: int,
    removed: set[int],
    costs: Costs,
) -> Plan:
    """One iteration's plan for nodes ``counts`` per stage without ``removed``.

    A stage of blocks whose every node was removed (stopped serving, or died) is skipped by
    every path: the plan is made over the other stages, and its ``stage_nodes`` keep the
    empty stage (so a node's stage index, and the blocks each path runs, stay the run's).
    The data nodes (stage 0) cannot all go: they hold the loss."""
    stage_nodes = nodes_by_stage(counts, removed)
    if not stage_nodes[0]:
        raise RuntimeError("every data node stopped serving: no microbatch has a loss")
    if microbatches % len(stage_nodes[0]):
        raise RuntimeError(
            f"{microbatches} microbatches do not split over {len(stage_nodes[0])} data nodes"
        )
    serving = tuple(nodes for nodes in stage_nodes if nodes)  # the stages a path can visit
    if len(serving) < 2:  # refused up front (`checks.check_skippipe`)
        raise RuntimeError("every stage of blocks stopped serving: no path has a block")
    if schedule in FULL_SCHEDULES:
        if schedule == "full-aware":  # only through replicas that are not stragglers
            slow = {n for n, factor in costs.slowdown.items() if factor > 1}
            paths, data = aware_paths(serving, microbatches, slow)
        else:  # every serving stage, a stage's replicas in turn, fill-drain (GPipe) order
            paths, data = even_paths(serving, microbatches, 0.0)
        return fill_drain_order(stage_nodes, paths, data)
    topology, ranks = local_topology(serving, costs)
    per_data_node = microbatches // len(stage_nodes[0])
    shape = IterationShape.from_skip_ratio(len(serving), skip, per_data_node)
    if schedule == "random":
        planned = scheduler.random_skip(topology, shape, seed=seed)
    else:
        planned = scheduler.skippipe(topology, shape, seed=seed)
    order = runner_order(planned, topology)
    return Plan(
        stage_nodes=stage_nodes,
        paths=tuple(tuple(ranks[n] for n in mb.path[1:-1]) for mb in planned.microbatches),
        data_node=tuple(ranks[mb.data_node] for mb in planned.microbatches),
        order={ranks[i]: tasks for i, tasks in order.items()},
    )
