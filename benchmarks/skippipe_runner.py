"""The SkipPipe runner's measured iteration times against the simulator's prediction of the same
plan, per schedule and straggler condition.

Reads the newest real run of each configuration of the ``skippipe`` workload from a results
database (``greenbench run --suite skippipe``; ``--run`` makes one first, into a temporary
database). For each, the plan the runner executed is rebuilt from its stored settings
(`greenbench.strategies.skippipe.routes.make_plan`: the same costs, seed and schedule), turned
into the simulator's schedule (`as_schedule`) and timed by the discrete-event simulator
(`greenbench.planner.skippipe.simulator`).

The simulator's compute times come from the model's FLOPs at an assumed rate (`PLANNING_FLOPS`),
which says nothing of this machine's. So one rate is fitted: the one at which the simulated full
pipeline without a straggler takes its measured median step time (bisection; printed). Every
other configuration is then a prediction at that rate, judged MET when within 15 % of its
measured median step time, SHORT otherwise. Nothing is asserted: the printed verdicts are the
result. What the simulator leaves out (the optimizer step, the replicas' gradient all-reduce,
Python between tasks, ranks sharing cores) shows up here as error.

    python benchmarks/skippipe_runner.py --db results.duckdb
    python benchmarks/skippipe_runner.py --run [--repeats 1]   # runs the suite first (minutes)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from greenbench.models import model_info
from greenbench.planner.skippipe.simulator import simulate
from greenbench.reporting.skippipe import read_runs
from greenbench.settings import SCHEMA
from greenbench.strategies.skippipe.checks import parse_nodes
from greenbench.strategies.skippipe.routes import (
    PLANNING_FLOPS,
    Costs,
    as_schedule,
    local_topology,
    make_plan,
    run_costs,
)

TOLERANCE = 0.15  # a prediction within 15 % of the measured median step time is MET


def plan_and_costs(settings: dict) -> tuple[object, Costs]:
    """The plan the runner executed for these stored settings, and the costs it was made with."""
    config = SCHEMA.config(settings)
    sp, data, model = config.skippipe, config.data, config.model
    info = model_info(model.family, model.size)
    costs = run_costs(sp, data, info, info.n_layers)
    plan = make_plan(
        parse_nodes(sp.stages),
        microbatches=data.global_batch // data.micro_batch,
        skip=sp.skip,
        schedule=sp.schedule,
        seed=config.run.seed,
        removed=set(),
        costs=costs,
    )
    return plan, costs


def predicted_s(plan: object, costs: Costs, scale: float) -> float:
    """One iteration of ``plan``, simulated with compute ``scale`` times the planning rate's."""
    scaled = replace(
        costs,
        forward_flops_per_sample_layer=costs.forward_flops_per_sample_layer * scale,
        data_node_flops_per_sample=costs.data_node_flops_per_sample * scale,
    )
    topology, ranks = local_topology(plan.stage_nodes, scaled)  # type: ignore[attr-defined]
    return simulate(as_schedule(plan, ranks, "runner"), topology).iteration_s  # type: ignore


def fit_scale(plan: object, costs: Costs, measured_s: float) -> float:
    """The compute scale at which ``plan`` simulates in ``measured_s`` (bisection in log space;
    the iteration grows with compute)."""
    lo, hi = 1e-4, 1e4
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if predicted_s(plan, costs, mid) < measured_s:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def run_suite(repeats: int) -> Path:
    """``greenbench run --suite skippipe`` into a temporary database; its path."""
    db = Path(tempfile.mkdtemp(prefix="skippipe-runner-")) / "runs.duckdb"
    root = Path(__file__).resolve().parents[1]
    env = os.environ | {"PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "greenbench", "run", "--suite", "skippipe", "--db", str(db),
               "--set", f"repeats={repeats}"]  # fmt: skip
    subprocess.run(command, check=True, env=env, cwd=root)
    return db


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="a database holding the skippipe workload's runs")
    parser.add_argument("--run", action="store_true", help="run the skippipe suite first")
    parser.add_argument("--repeats", type=int, default=1, help="repeats per configuration (--run)")
    args = parser.parse_args()
    if args.run:
        db = run_suite(args.repeats)
    elif args.db is not None:
        db = args.db
    else:
        parser.error("give --db or --run")
    table = read_runs(db)
    if table.empty or table["is_simulated"].all():
        print(f"{db}: no real run of the skippipe workload")
        return 2
    real = table[~table["is_simulated"].astype(bool)]
    rows = []
    for r in real.itertuples():
        settings = json.loads(r.config)["settings"]
        if int(settings.get("skippipe.fail_node", -1)) >= 0:
            continue  # a plan that changes mid-run: not one iteration to predict
        plan, costs = plan_and_costs(settings)
        rows.append((r, plan, costs))
    anchor = next(
        ((r, p, c) for r, p, c in rows if r.schedule == "full" and r.condition == "no straggler"),
        None,
    )
    if anchor is None:
        print("no full pipeline without a straggler to fit the compute rate on")
        return 2
    scale = fit_scale(anchor[1], anchor[2], float(anchor[0].step_time_p50_s))
    print(
        f"fitted on {anchor[0].config_name}: compute {scale:.3g}× the planning rate's "
        f"(this machine: {PLANNING_FLOPS / scale:.3g} FLOP/s per node, fitted, not measured)"
    )
    header = (
        f"{'condition':14s} {'schedule':10s} {'measured s':>10s} {'predicted s':>11s} "
        f"{'error':>7s} {'at planning rate s':>18s}  verdict"
    )
    print(header)
    met = short = 0
    for r, plan, costs in rows:
        measured = float(r.step_time_p50_s)
        predicted = predicted_s(plan, costs, scale)
        error = predicted / measured - 1
        if r is anchor[0]:
            verdict = "fitted"
        elif abs(error) <= TOLERANCE:
            verdict, met = "MET", met + 1
        else:
            verdict, short = "SHORT", short + 1
        print(
            f"{r.condition:14s} {r.schedule:10s} {measured:10.4f} {predicted:11.4f} "
            f"{error:+7.1%} {predicted_s(plan, costs, 1.0):18.4f}  {verdict}"
        )
    print(f"within {TOLERANCE:.0%}: {met} MET, {short} SHORT (of {met + short} predicted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
