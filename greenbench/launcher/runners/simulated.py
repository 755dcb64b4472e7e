"""Simulated SkipPipe runs: ``strategy = "skippipe"`` with ``skippipe.mode = "simulate"``.

No worker is launched and no meter read. The run's topology and each iteration's schedule come
from `greenbench.planner.skippipe`, and its discrete-event simulator times them
(docs/skippipe.md). ``skippipe.network`` picks the nodes:

* ``local``: the run's own nodes (``skippipe.stages``) on one host, every link at
  ``emulate.link_latency_ms`` and ``emulate.link_bandwidth_gbps``, the ``emulate.slow_nodes``
  ``emulate.slowdown`` times slower; the plans are the real runner's own
  (`greenbench.strategies.skippipe.routes`: `run_costs`, `make_plan`, `local_topology`), turned
  back into the simulator's schedule (`as_schedule`), so what is simulated is what the runner
  would execute, with a node that stops serving (``skippipe.fail_node``) left out from its
  step on.
* ``gcp12``: SkipPipe's published 20-node, 6-stage experiment on the 12-region GCP matrix
  (`published_topology`; ``skippipe.stages`` must be ``5-3-3-3-3-3``), with the published
  iteration's work: 6 microbatches per data node (30), 2 samples each, context 1024. The
  model and data settings do not apply; the run's row says so (model size ``published``,
  sequence length 1024, 20 devices, and layout ``pp6``: the network's 6 stages, not the spec's
  default ranks resolved; a stage holds up to 5 nodes there, so the layout's degrees do not
  multiply to its 20 devices as a rank mesh's do). ``full`` is the scheduler's full pipeline
  (fixed pipelines, first come first served), ``full-aware`` the same with its pipelines
  leaving out the slow nodes, ``random`` and ``skippipe`` its random skip and SkipPipe.

What a simulated run stores, per repeat (every repeat is the same: the simulation is
deterministic) and per node (a "rank" row each, numbered as the run's ranks on ``local``, as the
published nodes on ``gcp12``):

* tokens: microbatches × samples per microbatch × sequence length, per iteration, × train.steps
  (the window is exactly ``train.steps`` iterations: no warm-up, no lengthening);
* seconds: the simulated iteration times summed; step times: each iteration's;
* compute and wait seconds: each node's simulated busy and idle seconds (hops are delays,
  so link time is waiting);
* energy: `simulate_energy` at the assumed `ASSUMED_BUSY_W` and `ASSUMED_IDLE_W` per node,
  source ``model`` (`SIMULATED_SOURCE`), ``energy_measured`` false, and ``runs.simulated``
  true; net energy is gross less the assumed idle watts over the window;
* the visited share: the share of the (token, block) work the paths ran (stage 0's layers and
  the visited stages', over every layer), useful tokens beside tokens;
* no loss, FLOPs, MFU or memory (no model ran): stored unknown (NULL), never 0.

The watts are assumptions, not readings: those of an accelerator node under load and idle (the
figures `benchmarks/skippipe_sim.py` prices the published comparison at). Simulated results are
labelled "simulated (model)" wherever shown and are left out of the leaderboard.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from greenbench.energy.base import EnergyWindow
from greenbench.errors import GreenbenchError
from greenbench.launcher.runners.base import Peak, RunContext, Shape
from greenbench.launcher.runners.record import build_record, model_kernels
from greenbench.planner.skippipe import scheduler
from greenbench.planner.skippipe.schedule import IterationShape, Schedule
from greenbench.planner.skippipe.simulator import SimResult, simulate, simulate_energy
from greenbench.planner.skippipe.topology import (
    PUBLISHED_SAMPLES_PER_MICROBATCH,
    Topology,
    published_topology,
)
from greenbench.results import RankResult, RepeatResult, RunOutcome, RunRecord
from greenbench.settings.runspec import RunSpec
from greenbench.strategies.skippipe.settings import FULL_SCHEDULES
from greenbench.vocabulary import SIMULATED_SOURCE, Layout

#: assumed power of one node computing, W (not measured: an accelerator node under load)
ASSUMED_BUSY_W = 600.0
#: assumed power of one node idle, W (not measured)
ASSUMED_IDLE_W = 70.0
#: the published experiment's iteration (gcp12): microbatches per data node, context length
PUBLISHED_MICROBATCHES_PER_DATA_NODE = 6
PUBLISHED_SEQ_LEN = 1024
HOST = "simulated"


class SimulationFailed(GreenbenchError):
    """A simulated run could not be planned or simulated (the message says why)."""


@dataclass(frozen=True, slots=True)
class Iteration:
    """One simulated iteration: its result, the rank of each topology node, and the tokens
    each data node's microbatches carried."""

    result: SimResult
    ranks: tuple[int, ...]
    tokens: dict[int, int]
    energy_j: tuple[float, ...]
    share: float = 1.0  # the share of the (token, block) work its paths ran


def is_simulated(spec: RunSpec) -> bool:
    """Whether ``spec`` is simulated rather than run on devices."""
    c = spec.config
    return c.run.strategy == "skippipe" and c.skippipe is not None and c.skippipe.mode == "simulate"


def stage_counts(spec: RunSpec) -> tuple[int, ...]:
    """Nodes per stage (``skippipe.stages``, validated by the spec)."""
    return tuple(int(p) for p in str(spec.config.skippipe.stages).split("-") if p.strip())


def device_type(spec: RunSpec) -> str:
    """What a simulated run ran on: ``simulated:<network>``."""
    return f"simulated:{spec.config.skippipe.network}"


def record_fields(spec: RunSpec) -> dict[str, Any]:
    """The run record's columns a simulated run stores differently from a measured one: marked
    simulated, its simulated nodes as its devices, and on ``gcp12`` the published work and the
    published network's layout: ``pp`` its stages (6), its 20 nodes the devices (module
    docstring)."""
    fields: dict[str, Any] = {"simulated": True, "nproc": sum(stage_counts(spec)), "nnodes": 1}
    if spec.config.skippipe.network == "gcp12":
        stages = Layout(pp=len(stage_counts(spec)))  # 6 stages over 20 nodes: not the spec's ranks
        fields |= {"model_size": "published", "seq_len": PUBLISHED_SEQ_LEN, "layout": stages}
    return fields


def energy_note(spec: RunSpec) -> str:
    """What every simulated repeat's energy is, in words."""
    return (
        f"simulated on skippipe.network={spec.config.skippipe.network}: modelled energy, each "
        f"node's simulated busy seconds at {ASSUMED_BUSY_W:g} W and idle seconds at "
        f"{ASSUMED_IDLE_W:g} W (assumed watts, not measured); no model ran, so loss, FLOPs, MFU "
        "and memory are unknown"
    )


def _local_iterations(spec: RunSpec) -> list[Iteration]:
    from greenbench.models import model_info
    from greenbench.strategies.skippipe.routes import (
        as_schedule,
        local_topology,
        make_plan,
        run_costs,
        stage_layers,
    )

    c = spec.config
    sp, data = c.skippipe, c.data
    info = model_info(c.model.family, c.model.size)
    costs = run_costs(sp, data, info, info.n_layers)
    microbatches = data.global_batch // data.micro_batch
    per_microbatch = data.micro_batch * data.seq_len
    failed, warmup = sp.fail_node, c.train.warmup_steps
    done: dict[frozenset[int], Iteration] = {}
    out = []
    for step in range(c.train.steps):
        index = warmup + step  # the runner counts its warm-up steps too
        gone = frozenset({failed} if failed >= 0 and index >= sp.fail_step else ())
        if gone not in done:
            plan = make_plan(
                stage_counts(spec),
                microbatches=microbatches,
                skip=sp.skip,
                schedule=sp.schedule,
                seed=c.run.seed,
                removed=set(gone),
                costs=costs,
            )
            topology, ranks = local_topology(plan.stage_nodes, costs)
            schedule = as_schedule(plan, ranks, sp.schedule)
            tokens = {r: per_microbatch * plan.data_node.count(r) for r in ranks}
            layers = {s + 1: hi - lo for s, (lo, hi) in enumerate(stage_layers(
                info.n_layers, len(plan.stage_nodes) - 1))} | {0: 0}  # fmt: skip
            share = plan.visited_share(layers, info.n_layers, [per_microbatch] * len(plan.paths))
            done[gone] = _iteration(schedule, topology, ranks, tokens, share)
        out.append(done[gone])
    return out


def _published_iteration(spec: RunSpec) -> Iteration:
    c = spec.config
    sp = c.skippipe
    topology = published_topology()
    slow = {int(p) for p in str(sp.slow_nodes).split("-") if p.strip()}
    if slow:
        factor = float(sp.slowdown)
        nodes = tuple(replace(n, slowdown=factor) if n.id in slow else n for n in topology.nodes)
        topology = replace(topology, nodes=nodes)
    per_data_node = PUBLISHED_MICROBATCHES_PER_DATA_NODE
    shape = IterationShape.from_skip_ratio(topology.n_stages, sp.skip, per_data_node)
    if sp.schedule in FULL_SCHEDULES:
        aware = sp.schedule == "full-aware"
        schedule = scheduler.full_pipeline(topology, per_data_node, avoid_slow=aware)
    elif sp.schedule == "random":
        schedule = scheduler.random_skip(topology, shape, seed=c.run.seed)
    else:
        schedule = scheduler.skippipe(topology, shape, seed=c.run.seed)
    ranks = tuple(range(len(topology.nodes)))
    per_microbatch = PUBLISHED_SAMPLES_PER_MICROBATCH * PUBLISHED_SEQ_LEN
    tokens = {d: 0 for d in ranks}
    for mb in schedule.microbatches:
        tokens[mb.data_node] += per_microbatch
    # every stage holds the same layers there (4 of 24), stage 0 included
    visited = [len(mb.path) - 1 for mb in schedule.microbatches]
    share = sum(visited) / (len(visited) * topology.n_stages)
    return _iteration(schedule, topology, ranks, tokens, share)


def _iteration(
    schedule: Schedule,
    topology: Topology,
    ranks: tuple[int, ...],
    tokens: dict[int, int],
    share: float = 1.0,
) -> Iteration:
    result = simulate(schedule, topology)
    energy = simulate_energy(result, ASSUMED_BUSY_W, ASSUMED_IDLE_W)
    return Iteration(result, ranks, tokens, energy.node_j, share)


def iterations(spec: RunSpec) -> list[Iteration]:
    """The simulated iterations of one repeat's window (``train.steps`` of them)."""
    try:
        c = spec.config
        if c.skippipe.network == "gcp12":
            return [_published_iteration(spec)] * c.train.steps
        return _local_iterations(spec)
    except (RuntimeError, ValueError) as exc:
        raise SimulationFailed(f"{spec.name}: cannot simulate: {exc}") from None


def rank_results(spec: RunSpec, steps: list[Iteration], repeat: int) -> list[RankResult]:
    """One row per simulated node for one repeat (module docstring). Every node that served in
    any iteration has a row; a node left out of an iteration spends it idle."""
    seconds = math.fsum(it.result.iteration_s for it in steps)
    step_times = tuple(it.result.iteration_s for it in steps)
    every = sorted({r for it in steps for r in it.ranks})
    out = []
    for rank in every:
        busy = idle = joules = 0.0
        tokens = microbatches = 0
        useful = 0.0
        for it in steps:
            if rank in it.ranks:
                i = it.ranks.index(rank)
                busy += it.result.busy_s[i]
                idle += it.result.idle_s[i]
                joules += it.energy_j[i]
                microbatches += it.result.node_microbatches[i]
                tokens += it.tokens.get(rank, 0)
                useful += it.tokens.get(rank, 0) * it.share
            else:  # left out (stopped serving): idle through the iteration
                idle += it.result.iteration_s
                joules += ASSUMED_IDLE_W * it.result.iteration_s
        out.append(
            RankResult(
                rank=rank,
                local_rank=rank,
                host=HOST,
                repeat=repeat,
                tokens=tokens,
                seconds=seconds,
                compute_s=busy,
                comm_s=0.0,
                wait_s=idle,
                step_times_s=step_times,
                peak_mem_bytes=0,  # placeholder for aggregation; stored unknown
                flops=0.0,
                loss=0.0,
                n_microbatches=microbatches,
                energy=EnergyWindow(
                    source=SIMULATED_SOURCE, measured=False, seconds=seconds, energy_j=joules
                ),
                useful_tokens=useful,
            )
        )
    return out


def simulate_run(spec: RunSpec, *, carbon_g_per_kwh: float | None) -> RunOutcome:
    """Simulate every repeat of ``spec`` and return what the store keeps (module docstring)."""
    from greenbench.aggregate import aggregate_repeat

    steps = iterations(spec)
    nodes = len({r for it in steps for r in it.ranks})
    note = energy_note(spec)
    repeats: list[RepeatResult] = []
    ranks: list[RankResult] = []
    for k in range(spec.config.run.repeats):
        rows = rank_results(spec, steps, k)
        repeat = aggregate_repeat(
            rows,
            idle_power_w=ASSUMED_IDLE_W * nodes,
            peak_flops=None,
            n_devices=nodes,
            carbon_g_per_kwh=carbon_g_per_kwh,
        )
        unknown: dict[str, Any] = {"peak_mem_bytes": None, "flops": None, "loss": None}
        repeats.append(replace(repeat, energy_note=note, mfu_note="", useful_flops=None, **unknown))
        ranks += [replace(r, **unknown) for r in rows]
    return RunOutcome(status="ok", repeats=repeats, ranks=ranks)


class SimulatedRunner:
    """Runs a simulated SkipPipe configuration (module docstring): no ranks, no preflight, no
    CPU peak or idle-power sampling; stored like a measured run and marked simulated."""

    name = "simulated"

    @classmethod
    def takes(cls, spec: RunSpec) -> bool:
        return is_simulated(spec)

    def shape(self, spec: RunSpec) -> Shape:
        return Shape(nodes=1, ranks_per_node=1, launches_ranks=False)

    def peak(self, spec: RunSpec, *, measure: bool = True) -> Peak:
        return Peak(None, None, device_type(spec))

    def why_not_here(self, spec: RunSpec, peak: Peak, devices: int | None) -> str | None:
        return None  # the simulator needs nothing of this machine

    def record(self, spec: RunSpec, ctx: RunContext) -> RunRecord:
        return build_record(
            spec, ctx, device_type=ctx.peak.device_type, kernels=model_kernels(spec),
            **record_fields(spec),
        )  # fmt: skip

    def run(self, spec: RunSpec, ctx: RunContext) -> RunOutcome:
        ctx.phases.tell("simulating")
        return simulate_run(spec, carbon_g_per_kwh=ctx.carbon[0])

    def follow(self, spec: RunSpec, ctx: RunContext) -> None:
        """Nothing: node 0 simulates it, and no rank runs on another node."""
