"""SkipPipe's simulated comparison, reproduced: one iteration of the full pipeline, random skip,
SkipPipe without collision avoidance and SkipPipe, at 20 nodes / 6 stages / 33 % skip on the
12-region GCP latency/bandwidth matrix, beside the published simulated times.

Every schedule comes from `greenbench.planner.skippipe.scheduler` and is timed by its simulator
(docs/skippipe.md); nothing runs on a device. Each runs the iteration's 30 microbatches (5 data
nodes × 6, 2 samples each). SkipPipe's own simulator ran its full-pipeline baseline on the 3
pipeline heads only, 9 microbatches each (27); that run is printed too, beside its published
time. Energy is modelled: each node's simulated busy and idle seconds at assumed watts.

Goal (the SkipPipe issue): full pipeline > random skip > SkipPipe without collision avoidance >
SkipPipe, and SkipPipe's iteration at most 0.45 of the full pipeline's (published: 0.42). Exit
status 1 when either fails.

    python benchmarks/skippipe_sim.py [--allocation published|tuned] [--published-nl-london]
                                      [--seed 0] [--busy-w 600] [--idle-w 70]
    python benchmarks/skippipe_sim.py --small [--skip 0.34] [--microbatches 8]

``--small``: the 4-node topology of a real 4-rank run (data node 0, stage 1 on nodes 1 and 2,
stage 2 on node 3, one host), with no published figures to compare.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass

from greenbench.planner.skippipe.schedule import IterationShape, Schedule, validate
from greenbench.planner.skippipe.scheduler import (
    BUILDERS,
    full_pipeline,
    full_shape,
)
from greenbench.planner.skippipe.simulator import SimResult, simulate, simulate_energy
from greenbench.planner.skippipe.topology import Topology, published_topology, small_topology

#: SkipPipe's simulated iteration times, s (gensyn-ai/skippipe schedule.json; the full pipeline
#: ran 27 microbatches there, the others 30)
PUBLISHED_S = {
    "full pipeline": 79.94,
    "random skip": 48.92,
    "SkipPipe without collision avoidance": 35.43,
    "SkipPipe": 33.31,
}
GOAL_RATIO = 0.45
PUBLISHED_MICROBATCHES_PER_PIPELINE = 9
MICROBATCHES_PER_DATA_NODE = 6
SKIP = 1 / 3


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    schedule: Schedule
    result: SimResult
    build_s: float


def compare(topology: Topology, shape: IterationShape, seed: int) -> list[Row]:
    """The four schedules, validated and simulated, in BUILDERS' order."""
    rows = []
    for name, build in BUILDERS.items():
        t0 = time.perf_counter()
        schedule = build(topology, shape, seed)
        built = time.perf_counter() - t0
        rules = full_shape(topology, shape.microbatches_per_data_node)
        validate(schedule, topology, rules if name == "full pipeline" else shape)
        rows.append(Row(name, schedule, simulate(schedule, topology), built))
    return rows


def goals(rows: list[Row]) -> tuple[bool, bool, float]:
    """(ordering holds, ratio goal holds, SkipPipe ÷ full pipeline)."""
    times = [r.result.iteration_s for r in rows]
    ratio = times[-1] / times[0]
    return all(a > b for a, b in itertools.pairwise(times)), ratio <= GOAL_RATIO, ratio


def render(rows: list[Row], *, published: bool, busy_w: float, idle_w: float) -> list[str]:
    full = rows[0].result.iteration_s
    head = f"{'schedule':<38} {'sim s':>7} {'÷ full':>7}"
    if published:
        head += f" {'published s':>11} {'÷ full':>7}"
    lines = [head + f" {'collisions':>10} {'modelled kJ':>11} {'plan s':>7}"]
    for r in rows:
        line = f"{r.name:<38} {r.result.iteration_s:7.2f} {r.result.iteration_s / full:7.3f}"
        if published:
            p = PUBLISHED_S[r.name]
            line += f" {p:11.2f} {p / PUBLISHED_S['full pipeline']:7.3f}"
        kj = simulate_energy(r.result, busy_w, idle_w).joules / 1e3
        lines.append(line + f" {r.result.collisions:10d} {kj:11.1f} {r.build_s:7.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="the 4-node topology instead")
    parser.add_argument("--allocation", default="published", choices=["published", "tuned"])
    parser.add_argument("--published-nl-london", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", type=float, default=SKIP)
    parser.add_argument("--microbatches", type=int, default=None, help="per data node")
    parser.add_argument("--busy-w", type=float, default=600.0, help="assumed, per node")
    parser.add_argument("--idle-w", type=float, default=70.0, help="assumed, per node")
    args = parser.parse_args(argv)

    if args.small:
        topology = small_topology()
        m = args.microbatches or 8
        where = "4 nodes (stages 1-2-1, one host)"
    else:
        topology = published_topology(
            allocation=args.allocation,
            published_nl_london=args.published_nl_london,
            seed=args.seed,
        )
        m = args.microbatches or MICROBATCHES_PER_DATA_NODE
        nl = "as published" if args.published_nl_london else "corrected to 0.2425 GiB/s"
        where = (
            f"20 nodes / 6 stages on the 12-region GCP matrix (NL–London {nl}), "
            f"{args.allocation} allocation"
        )
    shape = IterationShape.from_skip_ratio(topology.n_stages, args.skip, m)
    print(
        f"SkipPipe simulated iteration: {where}; {len(topology.data_nodes) * m} microbatches, "
        f"paths of {shape.stages_per_path} of {topology.n_stages} stages, memory "
        f"{topology.memory_microbatches} per node, seed {args.seed}"
    )
    rows = compare(topology, shape, args.seed)
    for line in render(rows, published=not args.small, busy_w=args.busy_w, idle_w=args.idle_w):
        print(line)
    print(
        f"energy: modelled from the simulated timeline at an assumed {args.busy_w:g} W busy and "
        f"{args.idle_w:g} W idle per node, not measured; 'plan s': scheduler's own run time"
    )
    ordered, close, ratio = goals(rows)
    if not args.small:
        baseline = full_pipeline(
            topology, m, microbatches_per_pipeline=PUBLISHED_MICROBATCHES_PER_PIPELINE
        )
        t = simulate(baseline, topology).iteration_s
        print(
            f"full pipeline as SkipPipe's simulator ran it (3 heads × 9 = 27 microbatches): "
            f"{t:.2f} s (published {PUBLISHED_S['full pipeline']:.2f} s); SkipPipe ÷ it: "
            f"{rows[-1].result.iteration_s / t:.3f} (published "
            f"{PUBLISHED_S['SkipPipe'] / PUBLISHED_S['full pipeline']:.3f})"
        )
    if args.small:
        print(
            f"ordering full > random > without CA > SkipPipe: {'holds' if ordered else 'no'}; "
            f"SkipPipe ÷ full pipeline = {ratio:.3f} (the goals are the 20-node comparison's)"
        )
        return 0
    print(
        f"ordering full > random > without CA > SkipPipe: {'holds' if ordered else 'FAILS'}; "
        f"SkipPipe ÷ full pipeline = {ratio:.3f} "
        f"(goal ≤ {GOAL_RATIO}: {'holds' if close else 'FAILS'})"
    )
    return 0 if ordered and close else 1


if __name__ == "__main__":
    sys.exit(main())
