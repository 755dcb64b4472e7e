"""The convergence suite's fuller version: three seeds and a tighter target.

``greenbench run --suite convergence`` runs two seeds to 0.6 of the gap between an untrained
model's loss (ln V) and the data's entropy floor, sized to finish within 30 minutes on a 2-core
CPU. This runs the same configurations with seeds 0, 1 and 2 to ``--gap-closed`` (0.7 by
default) into ``--db`` (a temporary database unless given), then writes the report and prints
its section "Energy to a target loss": per configuration the seeds that reached the target,
energy and time to it with their intervals over seeds, and the computed statements (the family
that reaches it first, SkipPipe against the straggler-aware full pipeline, DDP/FSDP/ODC's
validation losses at equal steps). Nothing is asserted: the printed section is the result.
On a CPU without RAPL the energy is an estimate that follows the seconds.

    python benchmarks/convergence.py [--seeds 3] [--gap-closed 0.7] [--db results.duckdb]
    python benchmarks/convergence.py --db results.duckdb --report-only
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECTION = "## Energy to a target loss"


def section(report: str) -> str:
    """The report's section on runs to a target loss (up to the next section of its level)."""
    start = report.find(SECTION)
    if start < 0:
        return "(the report has no section on runs to a target loss)"
    end = report.find("\n## ", start + len(SECTION))
    return report[start : end if end >= 0 else len(report)].rstrip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--gap-closed", type=float, default=0.7)
    ap.add_argument("--db", type=Path, default=None)
    ap.add_argument("--report-only", action="store_true", help="report on --db, run nothing")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "convergence.duckdb"
        if not args.report_only:
            started = time.perf_counter()
            run = [
                sys.executable, "-m", "greenbench", "run", "--suite", "convergence",
                "--db", str(db), "--set", f"seed={','.join(map(str, range(args.seeds)))}",
                "--set", f"target.gap_closed={args.gap_closed:g}",
            ]  # fmt: skip
            print("$", " ".join(run[2:]), flush=True)
            status = subprocess.run(run, check=False).returncode
            print(f"suite finished in {time.perf_counter() - started:.0f} s (exit {status})")
        out = Path(tmp) / "report"
        subprocess.run(
            [sys.executable, "-m", "greenbench", "report", "--db", str(db), "--out", str(out)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(section((out / "README.md").read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
