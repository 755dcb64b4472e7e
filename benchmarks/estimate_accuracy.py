"""How close `greenbench run --dry-run`'s estimate comes to the run it previews.

Times `greenbench run --suite posttrain --dry-run` and `--suite SUITE --dry-run` as a user
types them (the goal: under 5 s, nothing written), then estimates SUITE into a fresh temporary
database (no stored runs: the model, `greenbench.launcher.durations`), runs it for real into
that database (`greenbench run --suite SUITE`, timed from outside) and prints the estimated
total, the measured total and their ratio, per configuration and in all; then estimates again,
now from the stored runs of this machine. Prints, asserts nothing (the issue's goal: the
estimate within 30 % of the measured total).

    python benchmarks/estimate_accuracy.py [--suite smoke]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from greenbench.launcher.plan_preview import LocalPlan, local_plan
from greenbench.spec import expand_suite
from greenbench.store import read_frame
from greenbench.suite import load_suite


def timed(args: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Seconds ``greenbench ARGS`` took, as a user's shell runs it, and what it returned."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "greenbench", *args], capture_output=True, text=True, check=False
    )
    return time.perf_counter() - start, done


def plan_of(suite: str, db: Path) -> LocalPlan:
    return local_plan(expand_suite(load_suite(suite), {}, label=None), db)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="smoke")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "estimate.duckdb"
        for suite in dict.fromkeys(["posttrain", args.suite]):
            seconds, done = timed(["run", "--suite", suite, "--dry-run", "--db", str(db)])
            status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
            print(f"greenbench run --suite {suite} --dry-run: {seconds:.2f} s ({status}); "
                  f"database created: {db.exists()}")  # fmt: skip
        before = plan_of(args.suite, db)
        print(f"\nestimate before any run (no stored runs): {before.total_s:.1f} s "
              f"({before.count('model')} model, {before.unknown} unknown)")  # fmt: skip
        wall, done = timed(["run", "--suite", args.suite, "--db", str(db)])
        if done.returncode != 0:
            print(done.stderr[-3000:])
            raise SystemExit(f"greenbench run --suite {args.suite} exited {done.returncode}")
        runs = read_frame(
            db,
            "SELECT config_name, epoch(finished_at) - epoch(started_at) AS wall_s, contended"
            " FROM runs ORDER BY started_at",
        )
        after = plan_of(args.suite, db)
    measured_sum = float(runs.wall_s.sum())
    print(f"greenbench run --suite {args.suite}: {wall:.1f} s measured (the command, start to "
          f"end); its configurations' stored wall times add up to {measured_sum:.1f} s; "
          f"{int(runs.contended.sum())} of {len(runs)} stored contended")  # fmt: skip
    print(f"\n{'configuration':<45} {'estimate':>9} {'measured':>9} {'ratio':>6} {'after':>9}")
    for row, first, then in zip(runs.itertuples(), before.running, after.running, strict=False):
        estimate = first.estimate.seconds if first.estimate else None
        again = then.estimate.seconds if then.estimate else None
        ratio = f"{estimate / row.wall_s:.2f}" if estimate and row.wall_s else "—"
        print(f"{row.config_name:<45} {estimate or float('nan'):>8.1f}s {row.wall_s:>8.1f}s "
              f"{ratio:>6} {again or float('nan'):>8.1f}s")  # fmt: skip
    print(f"\nestimated total before the run (model): {before.total_s:.1f} s")
    print(f"measured total (the command): {wall:.1f} s")
    ratio = before.total_s / wall
    print(f"estimate / measured = {ratio:.2f} ({abs(ratio - 1):.0%} off; goal: within 30 %)")
    print(f"estimated total after the run (from {after.count('stored')} stored runs): "
          f"{after.total_s:.1f} s; / measured = {after.total_s / wall:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
