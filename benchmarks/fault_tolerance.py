"""Fault-tolerant training: per checkpoint interval, what a failure cost and what Young and Daly
call the optimum interval, from the measured costs.

Runs the ``fault-tolerance`` workload (DDP ×2, the tiny Transformer, checkpoints every 2, 4 and
8 measured steps, rank 1 SIGKILLed after 15 of 16 in each) into a temporary database, or reads
a database that holds such runs (``--from-db``), and prints per interval the energy lost per
failure (its parts: the work redone, the restart), goodput, the checkpoints' seconds and
joules, the share of the window wasted (measured, and as the model computes it), and per group
the Young/Daly interval in seconds and steps from the measured δ (seconds per checkpoint), M
(the runs' seconds per failure: the injected rate) and R (seconds per restart); ``--mtbf-s``
prints the interval a machine failing that often would want, with the same δ and step time.

Figures come from `greenbench.reporting.fault_tolerance`, the reader of the report's section,
so the benchmark prints what ``greenbench report`` shows; energy is labelled as it was metered.

    python benchmarks/fault_tolerance.py [--from-db DB] [--keep DB] [--seeds K] [--mtbf-s S]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from greenbench.reporting.fault_tolerance import group_optimum, read_intervals
from greenbench.reporting.sections.fault_tolerance import EMPTY


def run_workload(db: Path, seeds: int) -> None:
    cmd = [sys.executable, "-m", "greenbench", "run", "--workload", "fault-tolerance",
           "--db", str(db)]  # fmt: skip
    if seeds > 1:
        cmd += ["--seeds", str(seeds)]
    t0 = time.perf_counter()
    print(f"running: {' '.join(cmd[1:])}", flush=True)
    done = subprocess.run(cmd, check=False)
    print(f"… {time.perf_counter() - t0:.0f} s, exit {done.returncode}", flush=True)


def _f(v: object, fmt: str = ".4g") -> str:
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "n/a"
    return "n/a" if math.isnan(x) else format(x, fmt)


def _range(r: pd.Series, figure: str, fmt: str = ".4g") -> str:
    text = _f(r[figure], fmt)
    if int(r[f"{figure}_n"]) >= 2:
        text += f" [{_f(r[f'{figure}_low'], fmt)}–{_f(r[f'{figure}_high'], fmt)}]"
    return text


def print_group(rows: pd.DataFrame, mtbf_s: float | None) -> None:
    first = rows.iloc[-1]
    print(
        f"\n{first.config_name} ({first.strategy}×{first.nproc}, ckpt.mode={first['mode']}, "
        f"fault.kill_rank={first.kill}) on {first.device_type}; energy: {first.energy}"
    )
    o = group_optimum(rows)
    for _, r in rows.iterrows():
        model = o.waste(int(r.every)) if o is not None and r.every > 0 else math.nan
        print(
            f"  every {int(r.every):3d} steps ({int(r.runs)} run{'s' if r.runs != 1 else ''}): "
            f"lost/failure {_range(r, 'lost_per_failure_j')} J (redone "
            f"{_f(r.redone_per_failure_j)} J over {_f(r.redone_steps_per_failure, '.3g')} steps, "
            f"restart {_f(r.restart_per_failure_j)} J in {_f(r.restart_per_failure_s)} s); "
            f"goodput {_range(r, 'goodput', '.3f')}; {_f(r.ckpt_count, '.0f')} checkpoints "
            f"waited {_f(r.ckpt_s)} s, {_f(r.ckpt_j)} J (δ {_f(r.delta_s)} s); waste "
            f"{_f(r.waste, '.1%')} measured, {_f(model, '.1%')} modelled"
        )
    if o is None:
        print("  Young/Daly: no checkpoint or no failure stored, δ or M unknown")
        return
    print(
        f"  Young/Daly from δ = {o.delta_s:.4g} s/checkpoint, M = {o.mtbf_s:.4g} s/failure (the "
        f"injected rate), R = {o.restart_s:.4g} s, step {o.step_s * 1e3:.4g} ms: Young "
        f"{o.young_s:.4g} s = {o.young_steps:.3g} steps, Daly {o.daly_s:.4g} s = "
        f"{o.daly_steps:.3g} steps"
    )
    if mtbf_s:
        m = replace(o, mtbf_s=mtbf_s)
        print(f"  at M = {mtbf_s:g} s (given): Young {m.young_s:.4g} s = {m.young_steps:.4g} "
              f"steps, Daly {m.daly_s:.4g} s = {m.daly_steps:.4g} steps")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-db", type=Path, help="read this database instead of running")
    parser.add_argument("--keep", type=Path, help="run into this database and keep it")
    parser.add_argument("--seeds", type=int, default=1, help="runs per interval (seeds)")
    parser.add_argument("--mtbf-s", type=float, help="also the optimum at this MTBF (seconds)")
    args = parser.parse_args(argv)
    if args.from_db is not None:
        if not args.from_db.exists():
            print(f"error: no database at {args.from_db}", file=sys.stderr)
            return 2
        db = args.from_db
    else:
        db = args.keep or Path(tempfile.mkdtemp(prefix="gb-fault-")) / "fault.duckdb"
        run_workload(db, args.seeds)
    table = read_intervals(db)
    if table.empty:
        print(EMPTY, f"({db})")
        return 1
    for _, rows in table.groupby("group", sort=False):
        print_group(rows, args.mtbf_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
