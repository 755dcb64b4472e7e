"""What greenbench's own start-up costs a short run: ``greenbench measure`` around a command
that does nothing, and a one-configuration ``greenbench run`` of a tiny user workload, cold and
warm. Goals (printed, never asserted): ``measure -- python -c pass`` costs under 2 s more than
the bare command on a quiet 2-core machine, and the run spends under 10 s before its first
training step.

1. **Parts**: fresh interpreters timed importing greenbench's CLI, torch, and the rank worker
   (what every rank imports), each less a bare ``python -c pass``; choosing the energy source
   (``select_meter``, in this process); one rank of the tiny workload started by hand as the
   launcher starts it, its stamps read back: imports, building, the first step.
2. **measure**: ``python -c pass`` (A) and ``greenbench measure --db TMP -- python -c pass``
   (B), ``--rounds`` rounds, A and B interleaved in each (AB, then BA), wall clock of each
   process. Printed: the medians, the median of the paired differences (B − A) and B / A, and
   from the stored runs the harness's seconds before the command started and after it ended.
3. **run**: ``greenbench run --workload tinylm.bench:workload`` (``examples/tinylm``, one
   repeat) ``--pairs`` times cold (an empty machine cache: the CPU peak is calibrated, the idle
   baseline sampled) then warm (the same cache: a peak calibrated on a quiet machine and a
   baseline taken quiet within ``energy.idle_max_age_s`` are reused). Printed per run from its
   stored harness cost (``runs.harness_*``): seconds before the first step, the ranks' share,
   calibration, idle baseline (reused or sampled) and teardown, and the whole command's wall
   time. On a busy machine a calibration or baseline taken under load is not reused (that is
   the rule, not a failure), so warm equals cold there: the columns say which.

The machine's load (1-minute load average over its cores) is printed before and after: the
goals are for a quiet machine, and figures taken on a busy one say so.

    python benchmarks/startup.py [--rounds N] [--pairs N] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tinylm"
WORKLOAD = "tinylm.bench:workload"
MEASURE_GOAL_S = 2.0
STARTUP_GOAL_S = 10.0
HARNESS = ("harness_startup_s", "harness_ranks_s", "harness_calibration_s",
           "harness_baseline_s", "idle_baseline_age_s", "harness_teardown_s")  # fmt: skip


def env_with(cache: Path) -> dict[str, str]:
    """This checkout's greenbench and the example package importable; machine caches in
    ``cache``."""
    paths = [str(ROOT), str(EXAMPLE), os.environ.get("PYTHONPATH", "")]
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
        GREENBENCH_CACHE_DIR=str(cache),
    )


def wall(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    """Wall seconds of one process run to its end (its output discarded); it must succeed."""
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def load() -> str:
    one, _, _ = os.getloadavg()
    cores = os.cpu_count() or 1
    return f"load average {one:.2f} on {cores} cores ({'quiet' if one < 0.2 * cores else 'busy'})"


def med(values: list[float]) -> float:
    return statistics.median(values)


def harness(db: Path) -> list[dict[str, Any]]:
    """Every run's stored harness cost, oldest first."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        cur = con.execute(f"SELECT {', '.join(HARNESS)} FROM runs ORDER BY started_at")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def parts(env: dict[str, str], rounds: int) -> None:
    print("\n== parts (fresh interpreters, median of", rounds, "each, less a bare python) ==")
    bare = med([wall([sys.executable, "-c", "pass"], env) for _ in range(rounds)])
    for what, code in (
        ("import greenbench.cli", "import greenbench.cli"),
        ("import torch", "import torch"),
        ("import greenbench.rank.worker (a rank's imports)", "import greenbench.rank.worker"),
    ):
        took = med([wall([sys.executable, "-c", code], env) for _ in range(rounds)])
        print(f"  {what:<50} {took - bare:6.2f} s")
    from greenbench.energy import select_meter

    start = time.perf_counter()
    meter = select_meter("cpu", None)
    took = time.perf_counter() - start
    meter.close()
    print(f"  {'energy source selection (cpu, auto): ' + meter.source:<50} {took:6.2f} s")
    rank_parts(env, rounds)


def rank_parts(env: dict[str, str], rounds: int) -> None:
    """One rank of the tiny workload started by hand as the launcher starts it, its stamps
    (`greenbench.rank.stamps`) read back: process start to imports done, to the model built,
    to the first step's end."""
    from greenbench.launcher.execute import threads_per_rank
    from greenbench.launcher.resolve import resolve_spec
    from greenbench.rank import stamps
    from greenbench.spec import expand

    sys.path[:0] = [str(ROOT), str(EXAMPLE)]  # this checkout's greenbench, the example's package
    spec = resolve_spec(expand(WORKLOAD, [{"repeats": 1, "train.min_window_s": 0.0}])[0])
    parts: dict[str, list[float]] = {"imports": [], "build": [], "first step": []}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="greenbench-startup-rank-") as name:
            out = Path(name)
            (out / "spec.json").write_text(spec.to_json())
            worker = [sys.executable, "-m", "greenbench.rank.worker",
                      "--spec", str(out / "spec.json"), "--out", str(out)]  # fmt: skip
            rank_env = dict(env, OMP_NUM_THREADS=str(threads_per_rank(spec.config.run.nproc)))
            wall(worker, rank_env)
            t = stamps.read(out)
        for part, (a, b) in (("imports", ("started", "imported")), ("build", ("imported", "ready")),
                             ("first step", ("ready", "first_step"))):  # fmt: skip
            if a in t and b in t:
                parts[part].append(t[b] - t[a])
    for part, what in (
        ("imports", "rank: process start, interpreter and imports"),
        ("build", "rank: spec, model, data and optimizer built"),
        ("first step", "rank: first (warm-up) training step"),
    ):
        shown = f"{med(parts[part]):6.2f} s" if parts[part] else "   n/a"
        print(f"  {what:<50} {shown}")


def measure(env: dict[str, str], rounds: int, tmp: Path) -> None:
    db = tmp / "measure.duckdb"
    bare = [sys.executable, "-c", "pass"]
    measured = [sys.executable, "-m", "greenbench", "measure", "--db", str(db), "--", *bare]
    a: list[float] = []
    b: list[float] = []
    for k in range(rounds):
        order = ((a, bare), (b, measured)) if k % 2 == 0 else ((b, measured), (a, bare))
        for into, cmd in order:
            into.append(wall(cmd, env))
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    print(f"\n== greenbench measure -- python -c pass ({rounds} rounds, A/B interleaved) ==")
    print(f"  A  python -c pass:                       median {med(a):.3f} s")
    print(f"  B  greenbench measure -- python -c pass:  median {med(b):.3f} s")
    print(
        f"  B − A: median of paired differences {med(diffs):.2f} s "
        f"(min {min(diffs):.2f}, max {max(diffs):.2f}); B / A {med(b) / med(a):.1f}×; "
        f"goal < {MEASURE_GOAL_S:g} s on a quiet 2-core machine: "
        f"{'met' if med(diffs) < MEASURE_GOAL_S else 'not met'} here"
    )
    stored = harness(db)
    before = [r["harness_startup_s"] for r in stored if r["harness_startup_s"] is not None]
    after = [r["harness_teardown_s"] for r in stored if r["harness_teardown_s"] is not None]
    print(
        f"  stored harness cost: median {med(before):.2f} s before the command started, "
        f"{med(after):.2f} s after it ended (storing the run itself not counted)"
    )


def run(env: dict[str, str], pairs: int, sets: list[str], tmp: Path) -> None:
    print(f"\n== greenbench run --workload {WORKLOAD} (one configuration, one repeat) ==")
    settings = ["repeats=1", "train.min_window_s=0", *sets]
    rows: list[tuple[str, dict[str, Any], float]] = []
    for k in range(pairs):
        cache, db = tmp / f"cache-{k}", tmp / f"run-{k}.duckdb"
        for kind in ("cold", "warm"):
            cmd = [sys.executable, "-m", "greenbench", "run", "--workload", WORKLOAD,
                   "--db", str(db), *(a for s in settings for a in ("--set", s))]  # fmt: skip
            seconds = wall(cmd, env_with(cache), cwd=EXAMPLE)
            rows.append((kind, harness(db)[-1], seconds))
    print(
        f"  {'start':<5} {'before 1st step':>15} {'ranks':>7} {'calibration':>12} "
        f"{'idle baseline':>22} {'teardown':>9} {'whole run':>10}"
    )
    for kind, h, seconds in rows:
        age = h["idle_baseline_age_s"]
        if age is not None:
            idle = f"reused ({age:.0f} s old)"
        elif h["harness_baseline_s"] is not None:
            idle = f"sampled {_s(h['harness_baseline_s'])}"
        else:
            idle = "none"
        calibration = h["harness_calibration_s"]
        cal = "cached" if calibration == 0 else _s(calibration)
        print(
            f"  {kind:<5} {_s(h['harness_startup_s']):>15} {_s(h['harness_ranks_s']):>7} "
            f"{cal:>12} {idle:>22} {_s(h['harness_teardown_s']):>9} {seconds:>8.1f} s"
        )
    for kind in ("cold", "warm"):
        got = [h["harness_startup_s"] for k, h, _ in rows if k == kind and h["harness_startup_s"]]
        if got:
            print(
                f"  {kind}: median {med(got):.1f} s before the first step; goal < "
                f"{STARTUP_GOAL_S:g} s: {'met' if med(got) < STARTUP_GOAL_S else 'not met'} here"
            )
    cold = [h["harness_startup_s"] for k, h, _ in rows if k == "cold"]
    warm = [h["harness_startup_s"] for k, h, _ in rows if k == "warm"]
    if all(v is not None for v in (*cold, *warm)) and cold and warm:
        print(f"  warm − cold: {med(warm) - med(cold):+.1f} s (median of each)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="A/B rounds of measure")
    parser.add_argument("--pairs", type=int, default=2, help="cold/warm pairs of run")
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        help="more --set KEY=VALUE for the run")  # fmt: skip
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT)]
    print(f"python {sys.version.split()[0]}; {load()}")
    with tempfile.TemporaryDirectory(prefix="greenbench-startup-") as name:
        tmp = Path(name)
        env = env_with(tmp / "cache-measure")
        parts(env, max(3, args.rounds // 2))
        measure(env, args.rounds, tmp)
        run(env, args.pairs, args.sets, tmp)
    print(f"\nafter: {load()}")


if __name__ == "__main__":
    main()
