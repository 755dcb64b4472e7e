"""Load imbalance made visible: wait_fraction of 2-rank data parallelism, fixed vs skewed lengths.

Runs the `data-parallel` workload (DDP, equal microbatch counts per rank) with `fixed` lengths and
with LongAlign-shaped lengths into a temporary database, then prints the median stored
wait_fraction of each and their ratio, all measured in this one run.

    python benchmarks/wait_fraction.py [--strategy ddp|fsdp] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from greenbench.launcher.launch import run_specs
from greenbench.spec import expand
from greenbench.store import read_frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="ddp", choices=["ddp", "fsdp"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "wait.duckdb"
        specs = expand(
            "data-parallel",
            [
                {
                    "strategy": args.strategy,
                    "data.lengths": ["fixed", "longalign"],
                    "repeats": args.repeats,
                    "energy.idle_s": 0.5,
                }
            ],
        )
        summary = run_specs(specs, db)
        if summary.failed:
            raise SystemExit(f"runs failed: {summary.errors}")
        frame = read_frame(
            db,
            "SELECT ru.lengths, median(re.wait_fraction) AS wait, median(re.wait_energy_j) AS "
            "wait_j, median(re.tokens_per_s) AS tps, bool_and(re.energy_measured) AS measured "
            "FROM runs ru JOIN results re USING (run_id) "
            "GROUP BY ru.lengths",
        ).set_index("lengths")
    for lengths, row in frame.iterrows():
        print(
            f"{args.strategy} {lengths:<10} wait_fraction = {row.wait:.3f}  "
            f"wait energy = {row.wait_j:.3g} J ({'measured' if row.measured else 'estimate'})  "
            f"tokens/s = {row.tps:,.0f}"
        )
    ratio = frame.loc["longalign", "wait"] / max(frame.loc["fixed", "wait"], 1e-9)
    print(f"wait_fraction longalign / fixed = {ratio:.2f}")


if __name__ == "__main__":
    main()
