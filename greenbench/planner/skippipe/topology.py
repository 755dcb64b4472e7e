"""Nodes, their regions and stages, and what one microbatch costs on each: the `Topology` every
SkipPipe schedule is built for and simulated on.

A node holds one stage of the model (``layers_per_stage`` layers); stage 0 is held by the *data
nodes*, which also hold the embedding, the head and the loss, and start and end every microbatch.
A node computes a microbatch's forward in ``compute_s_per_sample_layer × layers × samples ×
slowdown`` seconds (``slowdown`` > 1: a slower or throttled device); the loss on a data node costs
``LOSS_FACTOR`` × its forward and a backward ``BACKWARD_FACTOR`` × the forward (SkipPipe's
simulator). A hop carries one microbatch's activations (or their gradients),
``samples × activation_bytes_per_sample`` bytes, and costs the network's delay between the two
regions plus ``hop_overhead_s`` (SkipPipe's scheduler adds 0.35 s per hop for host-device copies
and framework overhead); a node talks to itself for free. ``memory_microbatches`` (M) is how many
microbatches a node can hold between their forward and their backward.

Builders:

* `published_topology`: SkipPipe's 20-node experiment (``reference/skippipe-network.md``): 20
  nodes placed round-robin over the 12 GCP regions in the order of SkipPipe's scheduler (node i
  in region ``PUBLISHED_REGION_ORDER[i % 12]``, as the published schedule has them), stages
  [5, 3, 3, 3, 3, 3], 24 layers at 4 per node, 2 samples per microbatch (the figure the
  published simulated times were made with), 16,777,324 bytes of activations per sample
  (SkipPipe's figure for context 1024, model dim 1024), 0.055 s per sample and layer, 0.35 s per
  hop, M = 3.
* `small_topology`: 4 nodes on one host: data node 0, stage 1 on nodes 1 and 2, stage 2 on node
  3: the layout of a real 4-rank run.
* `build_topology`: any regions and stages.

**Node-to-stage allocation.** SkipPipe allocates nodes to stages with a genetic algorithm (8,000
trials, population 200) on DT-FM's cost: pipeline traffic plus data-parallel traffic within each
stage. We do not run it. ``published_topology()`` takes the allocation the published schedule was
made with (``schedule.json``, `PUBLISHED_PARTITION`: data nodes in Belgium, Iowa, Japan, London
and Australia), so the comparison runs on the published inputs. ``allocation="tuned"`` takes our
own, simpler one, `allocate_stages`: hill climbing over swaps of two nodes, from a few seeded
random starts, on the full pipeline's own cost — the slowest round trip of a microbatch from any
data node through its pipeline (data node ``d`` feeds pipeline ``d % pipelines``), then their
sum. It ignores data-parallel traffic (which no simulated iteration here includes, nor did
SkipPipe's) and so tunes the allocation for the *baseline*: a harder test for SkipPipe. Every
schedule of a comparison runs on the same allocation.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from greenbench.errors import SpecError
from greenbench.planner.skippipe.network import Network, gcp_network, uniform_network

LOSS_FACTOR = 0.25  # loss and head on the data node, × its forward (SkipPipe's simulator)
BACKWARD_FACTOR = 1.5  # backward × forward (SkipPipe's simulator)

PUBLISHED_REGION_ORDER = (
    "Belgium", "Canada", "Germany", "Iowa", "Japan", "LA",
    "NL", "Oregon", "Singapore", "Taiwan", "London", "Australia",
)  # fmt: skip
PUBLISHED_STAGE_SIZES = (5, 3, 3, 3, 3, 3)
PUBLISHED_LAYERS_PER_STAGE = 4  # 24 layers over 6 stages
PUBLISHED_SAMPLES_PER_MICROBATCH = 2
PUBLISHED_ACTIVATION_BYTES_PER_SAMPLE = 16_777_324
PUBLISHED_COMPUTE_S_PER_SAMPLE_LAYER = 0.055
PUBLISHED_HOP_OVERHEAD_S = 0.35
PUBLISHED_MEMORY_MICROBATCHES = 3
#: the published schedule's node-to-stage allocation (its genetic algorithm's; node i in region
#: PUBLISHED_REGION_ORDER[i % 12]), each stage in the order of its full pipelines
PUBLISHED_PARTITION = (
    (0, 3, 4, 10, 11), (15, 8, 14), (1, 9, 6), (16, 12, 13), (5, 18, 7), (17, 2, 19),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Node:
    """One device: its ``id`` (its index in the topology), ``region``, ``stage`` and speed."""

    id: int
    region: str
    stage: int
    compute_s_per_sample_layer: float
    slowdown: float = 1.0


@dataclass(frozen=True, slots=True)
class Topology:
    """Nodes with their stages and speeds, the network between their regions, and the size of
    the work (module docstring). Times in seconds, sizes in bytes."""

    nodes: tuple[Node, ...]
    network: Network
    layers_per_stage: int
    samples_per_microbatch: int
    activation_bytes_per_sample: int
    hop_overhead_s: float = 0.0
    memory_microbatches: int = 3
    _links: tuple[tuple[float, ...], ...] = field(init=False, repr=False, compare=False)
    _stages: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if [n.id for n in self.nodes] != list(range(len(self.nodes))):
            raise SpecError("topology nodes must be numbered 0..N-1 in order")
        for n in self.nodes:
            self.network.index(n.region)
            if n.compute_s_per_sample_layer <= 0 or n.slowdown <= 0:
                raise SpecError(f"node {n.id}: compute time and slowdown must be positive")
        n_stages = 1 + max((n.stage for n in self.nodes), default=-1)
        stages = tuple(tuple(n.id for n in self.nodes if n.stage == s) for s in range(n_stages))
        if n_stages < 2 or any(not members for members in stages):
            raise SpecError(
                "a topology needs stage 0 (data nodes) and at least one more stage, every stage "
                f"0..{n_stages - 1} held by a node; stages held: {[len(m) for m in stages]}"
            )
        if self.memory_microbatches < 1 or self.layers_per_stage < 1:
            raise SpecError("memory_microbatches and layers_per_stage must be at least 1")
        size = self.message_bytes
        links = tuple(
            tuple(
                0.0
                if a.id == b.id
                else self.network.delay_s(a.region, b.region, size) + self.hop_overhead_s
                for b in self.nodes
            )
            for a in self.nodes
        )
        object.__setattr__(self, "_links", links)
        object.__setattr__(self, "_stages", stages)

    @property
    def n_stages(self) -> int:
        return len(self._stages)

    @property
    def data_nodes(self) -> tuple[int, ...]:
        return self._stages[0]

    def stage_nodes(self, stage: int) -> tuple[int, ...]:
        """Ids of the nodes holding ``stage``."""
        return self._stages[stage]

    def stage_of(self, node: int) -> int:
        return self.nodes[node].stage

    @property
    def message_bytes(self) -> int:
        """Bytes one hop carries: a microbatch's activations (forward) or their gradients."""
        return self.samples_per_microbatch * self.activation_bytes_per_sample

    def forward_s(self, node: int) -> float:
        """Seconds node ``node`` takes for one microbatch's forward through its stage."""
        n = self.nodes[node]
        return (
            n.compute_s_per_sample_layer
            * self.layers_per_stage
            * self.samples_per_microbatch
            * n.slowdown
        )

    def loss_s(self, node: int) -> float:
        """Seconds of the loss (head and loss, forward and backward) on data node ``node``."""
        return LOSS_FACTOR * self.forward_s(node)

    def backward_s(self, node: int) -> float:
        return BACKWARD_FACTOR * self.forward_s(node)

    def link_s(self, a: int, b: int) -> float:
        """Seconds one hop takes from node ``a`` to node ``b`` (0 from a node to itself)."""
        return self._links[a][b]

    def round_trip_s(self, path: Sequence[int]) -> float:
        """Seconds of one microbatch alone on ``path`` (data node first and last): every
        forward, the loss, every backward and every hop both ways, with no waiting."""
        d, middle = path[0], path[1:-1]
        hops = sum(self.link_s(a, b) + self.link_s(b, a) for a, b in pairwise(path))
        compute = sum(self.forward_s(n) + self.backward_s(n) for n in (d, *middle))
        return compute + self.loss_s(d) + hops


def build_topology(
    regions: Sequence[str],
    stages: Sequence[int],
    network: Network,
    *,
    layers_per_stage: int,
    samples_per_microbatch: int,
    activation_bytes_per_sample: int,
    compute_s_per_sample_layer: float | Sequence[float],
    slowdown: Sequence[float] | None = None,
    hop_overhead_s: float = 0.0,
    memory_microbatches: int = 3,
) -> Topology:
    """A topology whose node ``i`` sits in ``regions[i]`` and holds ``stages[i]``."""
    n = len(regions)
    if len(stages) != n:
        raise SpecError(f"{n} regions but {len(stages)} stages: give one of each per node")
    speeds = (
        [float(compute_s_per_sample_layer)] * n
        if isinstance(compute_s_per_sample_layer, int | float)
        else [float(s) for s in compute_s_per_sample_layer]
    )
    factors = [1.0] * n if slowdown is None else [float(s) for s in slowdown]
    if len(speeds) != n or len(factors) != n:
        raise SpecError("give one compute time and one slowdown per node")
    nodes = tuple(Node(i, regions[i], int(stages[i]), speeds[i], factors[i]) for i in range(n))
    return Topology(
        nodes=nodes,
        network=network,
        layers_per_stage=layers_per_stage,
        samples_per_microbatch=samples_per_microbatch,
        activation_bytes_per_sample=activation_bytes_per_sample,
        hop_overhead_s=hop_overhead_s,
        memory_microbatches=memory_microbatches,
    )


def _pipeline_cost(
    columns: Sequence[Sequence[int]], topology: Topology, pipelines: int
) -> tuple[float, float]:
    """(slowest, total) round trip of the full pipelines: pipeline ``p`` is node ``p`` of every
    stage after stage 0, fed by every data node ``d`` with ``d % pipelines == p``."""
    heads, rest = columns[0], columns[1:]
    trips = [
        topology.round_trip_s([h, *(col[i % pipelines] for col in rest), h])
        for i, h in enumerate(heads)
    ]
    return max(trips), sum(trips)


def allocate_stages(
    topology: Topology, stage_sizes: Sequence[int], *, seed: int = 0, restarts: int = 4
) -> tuple[tuple[int, ...], ...]:
    """The nodes of ``topology`` (whose own stages are ignored) on each stage, ``stage_sizes[s]``
    on stage ``s``, each stage's nodes in pipeline order (full pipeline ``p`` is node ``p`` of
    every stage after stage 0, fed by data nodes ``p``, ``p + pipelines``, …), tuned for
    the full pipeline (module docstring). Deterministic in ``seed``."""
    n = len(topology.nodes)
    if sum(stage_sizes) != n or len(stage_sizes) < 2 or min(stage_sizes) < 1:
        raise SpecError(f"stage sizes {list(stage_sizes)} do not cover the {n} nodes")
    pipelines = min(stage_sizes[1:])
    bounds = [sum(stage_sizes[:s]) for s in range(len(stage_sizes) + 1)]
    rng = random.Random(seed)

    def columns(order: list[int]) -> list[list[int]]:
        return [order[bounds[s] : bounds[s + 1]] for s in range(len(stage_sizes))]

    best_order, best_cost = list(range(n)), (float("inf"), float("inf"))
    for _ in range(restarts):
        order = list(range(n))
        rng.shuffle(order)
        cost = _pipeline_cost(columns(order), topology, pipelines)
        improved = True
        while improved:
            improved = False
            for i in range(n):
                for j in range(i + 1, n):
                    order[i], order[j] = order[j], order[i]
                    trial = _pipeline_cost(columns(order), topology, pipelines)
                    if trial < cost:
                        cost, improved = trial, True
                    else:
                        order[i], order[j] = order[j], order[i]
        if cost < best_cost:
            best_order, best_cost = list(order), cost
    return tuple(tuple(members) for members in columns(best_order))


def published_topology(
    *, allocation: str = "published", published_nl_london: bool = False, seed: int = 0
) -> Topology:
    """SkipPipe's 20-node, 6-stage experiment on the 12-region GCP network (module docstring).
    ``allocation``: ``"published"`` (the genetic algorithm's, `PUBLISHED_PARTITION`) or
    ``"tuned"`` (`allocate_stages`, from ``seed``). Nodes are numbered stage by stage, each
    stage in pipeline order."""
    network = gcp_network(published_nl_london=published_nl_london)
    n = sum(PUBLISHED_STAGE_SIZES)
    regions = [PUBLISHED_REGION_ORDER[i % len(PUBLISHED_REGION_ORDER)] for i in range(n)]
    settings = {
        "layers_per_stage": PUBLISHED_LAYERS_PER_STAGE,
        "samples_per_microbatch": PUBLISHED_SAMPLES_PER_MICROBATCH,
        "activation_bytes_per_sample": PUBLISHED_ACTIVATION_BYTES_PER_SAMPLE,
        "compute_s_per_sample_layer": PUBLISHED_COMPUTE_S_PER_SAMPLE_LAYER,
        "hop_overhead_s": PUBLISHED_HOP_OVERHEAD_S,
        "memory_microbatches": PUBLISHED_MEMORY_MICROBATCHES,
    }
    if allocation == "published":
        placed = PUBLISHED_PARTITION
    elif allocation == "tuned":
        unplaced = build_topology(regions, [0] + [1] * (n - 1), network, **settings)
        placed = allocate_stages(unplaced, PUBLISHED_STAGE_SIZES, seed=seed)
    else:
        raise SpecError(f"allocation {allocation!r}: use 'published' or 'tuned'")
    return build_topology(
        [regions[node] for members in placed for node in members],
        [s for s, members in enumerate(placed) for _ in members],
        network,
        **settings,
    )


def small_topology(
    *,
    compute_s_per_sample_layer: float = 0.01,
    slowdown: Sequence[float] | None = None,
    layers_per_stage: int = 2,
    samples_per_microbatch: int = 1,
    activation_bytes_per_sample: int = 1 << 20,
    latency_ms: float = 0.05,
    bandwidth_gib_s: float = 2.0,
    memory_microbatches: int = 2,
) -> Topology:
    """Four nodes on one host: data node 0, stage 1 on nodes 1 and 2, stage 2 on node 3."""
    return build_topology(
        ["local"] * 4,
        [0, 1, 1, 2],
        uniform_network(("local",), latency_ms=latency_ms, bandwidth_gib_s=bandwidth_gib_s),
        layers_per_stage=layers_per_stage,
        samples_per_microbatch=samples_per_microbatch,
        activation_bytes_per_sample=activation_bytes_per_sample,
        compute_s_per_sample_layer=compute_s_per_sample_layer,
        slowdown=slowdown,
        memory_microbatches=memory_microbatches,
    )
