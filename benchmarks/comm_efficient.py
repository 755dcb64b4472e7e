"""Communication-efficient data parallelism against its goals, each line marked MET or SHORT.

Runs the ``comm-efficient`` suite (or reads a database that holds it, ``--from-db``) and prints,
from the runs of this one invocation, for each rank count:

* bytes per step per rank of each method against DDP's (goals: PowerSGD r=4 at least 10×
  fewer on the tiny model's matrices; local SGD H=16 at least 16× fewer);
* step time over the emulated 1 Gb/s, 10 ms link against DDP's over the same link (goal:
  compression and local SGD faster than DDP there; "cannot tell" where the repeats overlap);
* where the database also holds the convergence suite's DDP runs (evaluated every 16 steps),
  energy and time to the target per method, with the interval over seeds.

Figures come from `greenbench.reporting.comm_efficient`, the readers of the report's section,
so the benchmark prints what ``greenbench report`` shows. Goals are predictions, never asserted.

    python benchmarks/comm_efficient.py [--from-db DB] [--keep DB] [--repeats N]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from greenbench.reporting.comm_efficient import DDP, OWN_TRANSPORT, read_methods, read_targets

#: (method, fewest times fewer bytes per step than DDP)
BYTES_GOALS = (("PowerSGD r=4", 10.0), ("local SGD H=16", 16.0))
#: methods that should step faster than DDP over the emulated slow link
FASTER_ON_SLOW_LINK = ("bf16", "PowerSGD r=1", "PowerSGD r=4", "local SGD H=4", "local SGD H=16")


def verdict(ok: bool) -> str:
    return "MET" if ok else "SHORT"


def run_suite(db: Path, repeats: int | None) -> None:
    cmd = [sys.executable, "-m", "greenbench", "run", "--suite", "comm-efficient", "--db", str(db)]
    if repeats:
        cmd += ["--repeats", str(repeats)]
    t0 = time.perf_counter()
    print(f"running: {' '.join(cmd[1:])}", flush=True)
    done = subprocess.run(cmd, check=False)
    print(f"… {time.perf_counter() - t0:.0f} s, exit {done.returncode}", flush=True)


def print_methods(methods: pd.DataFrame) -> None:
    for nproc, rows in methods.groupby("nproc", sort=True):
        print(f"\n{int(nproc)} ranks")
        own = rows[rows.link == OWN_TRANSPORT].set_index("method")
        slow = rows[rows.link != OWN_TRANSPORT].set_index("method")
        for method in own.index:
            r = own.loc[method]
            fewer = r.get("bytes_fewer")
            line = f"  {method:16s} {r.bytes_per_step / 1e6:9.3f} MB/step/rank"
            if fewer is not None and not math.isnan(fewer):
                line += f"  ×{fewer:6.1f} fewer than DDP"
            if method in slow.index:
                s = slow.loc[method]
                line += f"  | slow link: step {s.step_s * 1e3:8.1f} ms"
                if method != DDP:
                    line += f" (÷ DDP {s.step_ratio:.2f}: {s.step_verdict.text('time')})"
            print(line)
        for method, goal in BYTES_GOALS:
            if method in own.index:
                fewer = float(own.loc[method].bytes_fewer)
                print(f"  goal: {method} ≥ {goal:g}× fewer bytes: ×{fewer:.1f}  "
                      f"{verdict(fewer >= goal)}")  # fmt: skip
        for method in FASTER_ON_SLOW_LINK:
            if method in slow.index:
                s = slow.loc[method]
                faster = s.step_verdict.word == "less"
                print(f"  goal: {method} faster than DDP over the slow link: "
                      f"{s.step_ratio:.2f}× DDP's step ({s.step_verdict.text('time')})  "
                      f"{verdict(faster)}")  # fmt: skip


def print_targets(targets: pd.DataFrame) -> None:
    if targets.empty:
        print("\n(no convergence runs of DDP evaluated every 16 steps in this database: energy to"
              " target not shown; run the convergence suite into the same --db)")  # fmt: skip
        return
    print("\nenergy and time to the target (interval over seeds)")
    for _, r in targets.iterrows():
        reached = f"{int(r.n_reached)}/{int(r.n_seeds)} seeds reached"
        if r.n_reached:
            figures = (
                f"{r.energy_to_target_j:,.0f} J [{r.energy_to_target_j_low:,.0f}–"
                f"{r.energy_to_target_j_high:,.0f}], {r.seconds_to_target:.1f} s "
                f"[{r.seconds_to_target_low:.1f}–{r.seconds_to_target_high:.1f}] ({r.energy})"
            )
        else:
            figures = "not reached"
        print(f"  {int(r.devices)} ranks {r.method:16s} {figures}; {reached}: {r.per_seed}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-db", type=Path, help="read this database instead of running")
    parser.add_argument("--keep", type=Path, help="run into this database and keep it")
    parser.add_argument("--repeats", type=int, help="measured windows per configuration")
    args = parser.parse_args(argv)
    if args.from_db is not None:
        if not args.from_db.exists():
            print(f"error: no database at {args.from_db}", file=sys.stderr)
            return 2
        db = args.from_db
    else:
        db = args.keep or Path(tempfile.mkdtemp(prefix="gb-comm-")) / "comm.duckdb"
        run_suite(db, args.repeats)
    methods = read_methods(db)
    if methods.empty:
        print("no ok runs of the comm-efficient workload in", db)
        return 1
    print_methods(methods)
    print_targets(read_targets(db))
    return 0


if __name__ == "__main__":
    sys.exit(main())
