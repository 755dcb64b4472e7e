"""ODC against FSDP on skewed post-training lengths: tokens/s ratios next to the compute-only bound.

Runs the `fsdp-vs-odc` workload (FSDP with equal microbatch counts per rank, ODC with each rank's
share balanced by cost) into a temporary database, for each length distribution at 2 ranks, at
4 ranks with a CPU quota per rank, and at 4 ranks sharing the cores without quotas, then prints,
all measured in this one run:

* ODC ÷ FSDP tokens/s, each side's wait fraction, J/token and wait energy;
* the compute-only bound for the same batches: FSDP's time per step as the sum over microbatch
  slots of the slowest rank's microbatch, against ODC's as the most loaded rank's total, summed
  over the steps the runs measured. It is given under the cost model the runs balanced with
  (``data.cost_model``, linear in tokens by default) and under the ODC repository's 1.5B fit
  (quadratic), which the paper's GPUs follow more closely than this CPU's small model does;
* ODC ÷ FSDP divided by the same ratio with ``fixed`` lengths in the same setup (``÷ fixed``):
  fixed lengths have no imbalance to remove, so their ratio is what the transport alone gives
  (shared-memory gets and pushes against gloo collectives), and ``÷ fixed`` is the part that
  comes from balancing, to set beside the bound;
* the goals of the ODC issue, with whether each was met.

    python benchmarks/odc.py [--lengths fixed,uniform,swe-smith,longalign] [--repeats 2]
                             [--setups 2,4q,4] [--keep DB] [--from-db DB]

A setup is a rank count with ``q`` for a CPU quota per rank (on this 2-core machine 4 ranks are
only comparable to 4 devices under quotas: without them a waiting rank lends its core to the
busy ones, which hides the very imbalance ODC removes).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from greenbench.data import DataPlan, MarkovSource
from greenbench.launcher.launch import run_specs
from greenbench.reporting.odc import read_pairs, setup_label
from greenbench.spec import expand
from greenbench.store import read_frame

GOALS = {  # (ranks, quota, lengths): minimum ODC ÷ FSDP tokens/s, from the ODC issue
    (4, True, "swe-smith"): 1.2,
    (2, False, "swe-smith"): 1.1,
    (4, True, "fixed"): 0.95,
    (2, False, "fixed"): 0.95,
}


def bound(settings: dict, world: int, steps: range, cost_model: str) -> float:
    """FSDP's compute-only time over ODC's for ``steps``, under ``cost_model``."""
    source = MarkovSource(vocab_size=1024, seed=settings["seed"])

    def plan(balance: str) -> DataPlan:
        return DataPlan(
            source=source,
            lengths=settings["data.lengths"],
            seq_len=settings["data.seq_len"],
            global_batch=settings["data.global_batch"],
            micro_batch=settings["data.micro_batch"],
            balance=balance,
            cost_model=cost_model,
            scale=settings["data.scale"],
            seed=settings["seed"],
        )

    fsdp, odc = plan("same-count"), plan("balanced-cost")
    lockstep = loaded = 0.0
    for step in steps:
        parts = fsdp.split(step, world)
        slots = max(len(p.microbatch_costs) for p in parts)
        costs = np.zeros((world, slots))
        for r, p in enumerate(parts):
            costs[r, : len(p.microbatch_costs)] = p.microbatch_costs
        lockstep += costs.max(axis=0).sum()
        loaded += max(p.cost for p in odc.split(step, world))
    return lockstep / loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="fixed,uniform,swe-smith,longalign")
    parser.add_argument("--setups", default="2,4q,4")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="also copy the database here")
    parser.add_argument(
        "--from-db", type=Path, help="print the figures of a database kept earlier, run nothing"
    )
    args = parser.parse_args()
    lengths = args.lengths.split(",")
    setups = [(int(s.rstrip("q")), s.endswith("q")) for s in args.setups.split(",")]
    specs = []
    for nproc, quota in setups:
        specs += expand(
            "fsdp-vs-odc",
            [
                {
                    "nproc": nproc,
                    "emulate.rank_cpu_quota": "on" if quota else "off",
                    "data.lengths": lengths,
                    "repeats": args.repeats,
                    "energy.idle_s": 0.5,
                }
            ],
        )
    with tempfile.TemporaryDirectory() as tmp:
        db = args.from_db or Path(tmp) / "odc.duckdb"
        if args.from_db is None:
            print(f"{len(specs)} runs: FSDP and ODC × {lengths} × {args.setups}", flush=True)
            summary = run_specs(specs, db)
            if summary.failed:
                raise SystemExit(f"runs failed: {summary.errors}")
            if args.keep:
                shutil.copy(db, args.keep)
        pairs = read_pairs(db)
        steps = read_frame(
            db,
            "SELECT ru.lengths, ru.nproc, ru.rank_cpu_quota, "
            "max(len(re.step_times_s)) * max(re.repeat + 1) AS measured "
            "FROM runs ru JOIN results re USING (run_id) GROUP BY ALL",
        )
    base = specs[0].settings
    warmup = base["train.warmup_steps"]
    print()
    print(
        f"{'setup':<22} {'lengths':<10} {'FSDP tok/s':>10} {'ODC tok/s':>10} {'ODC÷FSDP':>9} "
        f"{'÷ fixed':>8} {'bound lin':>9} {'bound 1.5B':>10} {'wait FSDP→ODC':>15} "
        f"{'J/token FSDP→ODC':>20}"
    )
    fixed = pairs[pairs.lengths == "fixed"].set_index(["nproc", "rank_cpu_quota"])["speedup"]
    for r in pairs.itertuples():
        match = steps[
            (steps.lengths == r.lengths)
            & (steps.nproc == r.nproc)
            & (steps.rank_cpu_quota == r.rank_cpu_quota)
        ]
        measured = range(warmup, warmup + int(match.measured.max()))
        settings = {**base, "data.lengths": r.lengths}
        linear = bound(settings, r.nproc, measured, base["data.cost_model"])
        fit = bound(settings, r.nproc, measured, "1.5b")
        control = fixed.get((r.nproc, r.rank_cpu_quota))
        beyond = f"{r.speedup / control:>8.2f}" if control else f"{'n/a':>8}"
        print(
            f"{setup_label(r.nproc, r.rank_cpu_quota):<22} {r.lengths:<10} "
            f"{r.fsdp_tokens_per_s:>10,.0f} {r.odc_tokens_per_s:>10,.0f} {r.speedup:>9.2f} "
            f"{beyond} {linear:>9.2f} {fit:>10.2f} "
            f"{r.fsdp_wait_fraction:>7.3f}→{r.odc_wait_fraction:<7.3f} "
            f"{r.fsdp_joules_per_token:>9.3g}→{r.odc_joules_per_token:<9.3g} ({r.odc_energy})"
        )
    print()
    print("goals (ODC issue): ODC ÷ FSDP tokens/s, and ODC's wait fraction below FSDP's")
    for (nproc, quota, lengths_name), goal in GOALS.items():
        row = pairs[
            (pairs.nproc == nproc)
            & (pairs.rank_cpu_quota == quota)
            & (pairs.lengths == lengths_name)
        ]
        if row.empty:
            print(f"  {setup_label(nproc, quota)}, {lengths_name}: not run")
            continue
        got = float(row.speedup.iloc[0])
        verdict = "met" if got >= goal else "NOT met"
        where = f"{setup_label(nproc, quota)}, {lengths_name}"
        print(f"  {where}: ≥ {goal:.2f}× → {got:.2f}× {verdict}")
    lower = (pairs.odc_wait_fraction < pairs.fsdp_wait_fraction).sum()
    print(f"  ODC waits less than FSDP in {lower} of {len(pairs)} pairs")


if __name__ == "__main__":
    main()
