"""How far the planner is from what this host measured, on runs it was not calibrated on.

Reads the ok CPU runs stored for this host in a results database, calibrates the planner
(`greenbench.planner.calibrate.fit`: per-core sustained FLOP/s, gloo's α and β) on a subset — by
default the data-parallel and tensor-parallel layouts (and single ranks) of one model size — and
scores every other stored run: pipeline, context-parallel and mixed layouts, and other sizes.
For each it prints, all from this one database:

* the predicted and measured step time (window seconds over steps, median over repeats) and the
  error ``predicted / measured − 1``;
* the predicted model state per rank (`Memory.model_state_b`: parameters, gradients, AdamW
  state, saved activations and logits) against the state the run counted from tensors
  (``state_bytes``, the busiest rank; `greenbench.rank.state_memory`), and the error; the
  busiest rank's parts beside the predicted ones, to show where a miss comes from;
* per category, and over every scored run, the median absolute errors against the goals of the
  hybrid issue (≤ 25 % step time, ≤ 15 % memory). A category with no stored run is named as
  such; runs that cannot be scored (variable lengths, a batch that does not divide, no state
  counted) are listed with the reason. Runs during which other processes kept more than
  ``--max-contention`` cores busy (stored as contended, with the figure in their warning) are
  left out: on a shared 2-core machine their step times swing by several times. Each
  configuration is scored once, by its least contended, newest run.

    python benchmarks/planner.py [--db greenbench.duckdb] [--calibrate-on single,dp,tp]
                                 [--size SIZE] [--family transformer] [--host HOST]
                                 [--max-contention 0.5]

The runs it reads come from ``greenbench run`` (e.g. ``--workload data-parallel``, and the
hybrid layouts with ``--set strategy=hybrid --set layout.tp=2``); nothing is run here. The
device is `greenbench.planner.host`: each rank its share of this host's cores.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenbench.errors import GreenbenchError
from greenbench.models import FAMILIES, model_preset
from greenbench.planner.calibrate import fit, stored_runs
from greenbench.planner.device import Calibration
from greenbench.planner.host import HOST, host_device, host_facts
from greenbench.planner.measured import Measured, measured
from greenbench.vocabulary import Layout

GOALS = {"step time": 0.25, "memory": 0.15}  #: median absolute error, from the hybrid issue
KINDS = ("single", "dp", "tp", "pp", "cp", "mixed")
EXPECTED = ("pp", "cp", "mixed", "other size")  #: what the issue scores the planner on
CONTENDED = re.compile(r"kept ([0-9.]+) of [0-9]+ cores busy")


def kind(layout: Layout) -> str:
    """single, dp, tp, pp or cp when at most one kind of degree is above 1, else mixed."""
    parallel = {
        "dp": layout.dp > 1,
        "tp": layout.tp > 1,
        "pp": layout.pp > 1,
        "cp": layout.cp > 1,
    }
    used = [k for k, on in parallel.items() if on]
    return "single" if not used else used[0] if len(used) == 1 else "mixed"


def contention(run: dict[str, Any]) -> float:
    """Cores other processes kept busy while ``run`` ran: 0 when it is not stored as contended,
    else the figure of its warning (`greenbench.rank.contention` writes "kept X of N cores
    busy"), infinite when the warning gives none."""
    if not run.get("contended"):
        return 0.0
    for warning in run.get("warnings") or []:
        found = CONTENDED.search(str(warning))
        if found:
            return float(found.group(1))
    return math.inf


def one_per_configuration(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of the runs of each configuration (``config_key``), the least contended, newest one."""
    best: dict[str, dict[str, Any]] = {}
    for run in runs:
        key = str(run["config_key"])
        rank = (contention(run), -run["started_at"].timestamp())
        if key not in best or rank < (
            contention(best[key]),
            -best[key]["started_at"].timestamp(),
        ):
            best[key] = run
    return list(best.values())


def layout_of(run: dict[str, Any]) -> Layout:
    return Layout.parse(str(run["layout"]), strategy=run["strategy"])


def model_of(run: dict[str, Any]) -> tuple[str, str]:
    return str(run["model_family"]), str(run["model_size"])


def size_order(family: str, size: str) -> int:
    sizes = list(FAMILIES[family].presets if family in FAMILIES else {})
    return sizes.index(size) if size in sizes else len(sizes)


@dataclass(frozen=True, slots=True)
class Scored:
    """One run against its prediction, with the busiest rank's measured parts."""

    run: dict[str, Any]
    m: Measured
    category: str
    parts: dict[str, float] | None  # param, grad, optim, activation bytes of the busiest rank

    @property
    def time_error(self) -> float | None:
        return self.m.errors()["step_s"]

    @property
    def memory_error(self) -> float | None:
        return self.m.errors()["state_bytes"]


def busiest_parts(run: dict[str, Any]) -> dict[str, float] | None:
    """The counted parts of the rank that held the most state (first repeat)."""
    ranks = [r for r in run.get("rank_results", []) if r.get("state_bytes") is not None]
    if not ranks:
        return None
    first = min(r["repeat"] for r in ranks)
    top = max((r for r in ranks if r["repeat"] == first), key=lambda r: r["state_bytes"])
    return {k: float(top[f"{k}_bytes"]) for k in ("param", "grad", "optim", "activation")}


def choose_model(runs: list[dict[str, Any]], kinds: set[str], family: str | None,
                 size: str | None) -> tuple[str, str]:  # fmt: skip
    """The model to calibrate on: the one named, else the one with the most runs of ``kinds``
    (the smaller size on a tie)."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for run in runs:
        if kind(layout_of(run)) in kinds and (family is None or run["model_family"] == family):
            counts[model_of(run)] += 1
    if size is not None:
        fam = family or next((f for f, s in counts if s == size), "transformer")
        return fam, size
    if not counts:
        raise GreenbenchError(
            f"no stored run of the calibration kinds ({', '.join(sorted(kinds))}) on this host"
        )
    return max(counts, key=lambda k: (counts[k], -size_order(*k)))


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.0%}"


def mib(x: float | None) -> str:
    return "—" if x is None else f"{x / 2**20:,.1f}"


def median_abs(values: Iterable[float | None]) -> float | None:
    xs = [abs(v) for v in values if v is not None]
    return statistics.median(xs) if xs else None


def print_table(title: str, rows: list[Scored]) -> None:
    print(f"\n{title} (ranks: q = a CPU quota per rank, * = other processes kept some cores busy)")
    header = (
        f"{'run':12}  {'model':16} {'layout':22} {'strategy':8} {'ranks':>6}  "
        f"{'step s meas':>11} {'pred':>8} {'err':>6}  "
        f"{'state MiB meas':>14} {'pred':>8} {'err':>6}"
    )
    print(header)
    print("-" * len(header))
    for s in rows:
        run, m = s.run, s.m
        world = int(run["nproc"]) * int(run["nnodes"])
        ranks = f"{world}{'q' if run.get('rank_cpu_quota') else ''}"
        if contention(run):
            ranks += "*"
        model = "/".join(model_of(run))
        print(
            f"{run['run_id']:12}  {model:16} {m.layout.text:22} {run['strategy']:8} {ranks:>6}  "
            f"{m.step_s or 0:11.3f} {m.predicted.step_s:8.3f} {pct(s.time_error):>6}  "
            f"{mib(m.state_bytes):>14} {mib(m.predicted.memory.model_state_b):>8} "
            f"{pct(s.memory_error):>6}"
        )


def print_parts(rows: list[Scored]) -> None:
    """Where the memory error comes from: state (parameters, gradients, AdamW) and activations."""
    print("\nmodel state of the busiest rank, by part (MiB; measured / predicted)")
    print(f"{'run':12}  {'layout':22} {'params+grads+AdamW':>22} {'activations+logits':>22}")
    for s in rows:
        if s.parts is None:
            continue
        p = s.m.predicted.memory
        state = s.parts["param"] + s.parts["grad"] + s.parts["optim"]
        act = s.parts["activation"]
        print(
            f"{s.run['run_id']:12}  {s.m.layout.text:22} "
            f"{mib(state):>10} / {mib(p.state_b):<9} {mib(act):>10} / "
            f"{mib(p.activations_b + p.logits_b):<9}"
        )


def print_calibration(c: Calibration, used: list[dict[str, Any]], cores: int) -> None:
    print(f"calibration: {len(used)} run(s) on a host of {cores} cores")
    if c.sustained_flops is not None:
        print(f"  sustained: {c.sustained_flops / 1e9:.1f} GFLOP/s per core "
              f"({c.runs.get('sustained_flops', 0)} runs)")  # fmt: skip
    else:
        print("  sustained: not fitted (assumed share of the GEMM peak)")
    if c.fast is not None:
        note = f"; {c.notes['fast']}" if "fast" in c.notes else ""
        runs = c.runs.get("fast", 0)
        print(f"  gloo link per core: α {c.fast.alpha_s * 1e6:.1f} µs, "
              f"β {c.fast.beta_s_per_byte * 1e9:.2f} ns/B ({runs} runs{note})")  # fmt: skip
    else:
        print("  gloo link: not fitted (no communication records of the calibration runs)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, default=Path("greenbench.duckdb"))
    parser.add_argument(
        "--calibrate-on",
        default="single,dp,tp",
        help=f"layout kinds to calibrate on, of {', '.join(KINDS)} (default: single,dp,tp)",
    )
    parser.add_argument("--size", help="model size to calibrate on (default: the most runs)")
    parser.add_argument("--family", help="model family to calibrate on (default: the most runs)")
    parser.add_argument("--host", help="whose runs (default: this host)")
    parser.add_argument(
        "--max-contention",
        type=float,
        default=0.5,
        help="leave out runs during which other processes kept more than this many cores busy "
        "(default 0.5; a run stored as contended without a figure counts as too many)",
    )
    args = parser.parse_args(argv)
    kinds = {k.strip() for k in args.calibrate_on.split(",") if k.strip()}
    unknown = kinds - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {', '.join(sorted(unknown))}; choose of {', '.join(KINDS)}")

    try:
        stored = stored_runs(args.db, HOST, args.host)
        facts = host_facts(stored)
        runs = one_per_configuration(r for r in stored if contention(r) <= args.max_contention)
        family, size = choose_model(runs, kinds, args.family, args.size)
    except GreenbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def in_calibration(run: dict[str, Any]) -> bool:
        return model_of(run) == (family, size) and kind(layout_of(run)) in kinds

    calibration_runs = [r for r in runs if in_calibration(r)]
    c = fit(calibration_runs)
    print(f"{len(stored)} ok CPU run(s) of host {facts.host!r} ({facts.device_type}) in {args.db}")
    busy = [r for r in stored if contention(r) > args.max_contention]
    if busy:
        print(f"left out: {len(busy)} run(s) during which other processes kept more than "
              f"{args.max_contention:g} cores busy (--max-contention): "
              f"{', '.join(r['run_id'] for r in busy)}")  # fmt: skip
    repeated = len(stored) - len(busy) - len(runs)
    if repeated:
        print(f"left out: {repeated} older or busier run(s) of a configuration scored once")
    print(f"calibrated on {family}/{size}, layouts {', '.join(sorted(kinds))}")
    print_calibration(c, calibration_runs, facts.cores)

    devices: dict[int, Any] = {}
    held_out: list[Scored] = []
    in_sample: list[Scored] = []
    skipped: list[tuple[dict[str, Any], str]] = []
    for run in sorted(runs, key=lambda r: (model_of(r), int(r["nproc"]), str(r["layout"]))):
        world = int(run["nproc"]) * int(run["nnodes"])
        if world not in devices:
            devices[world] = host_device(facts, world, calibration=c)
        try:
            shape = model_preset(*model_of(run))
        except GreenbenchError as exc:
            skipped.append((run, str(exc)))
            continue
        m = measured(run, shape, devices[world])
        if m is None:
            why = (
                f"lengths {run['lengths']}: rows are not full"
                if run.get("lengths") != "fixed"
                else "its batch does not divide over its layout"
            )
            skipped.append((run, why))
            continue
        k = kind(m.layout)
        category = k if model_of(run) == (family, size) else "other size"
        scored = Scored(run, m, category, busiest_parts(run))
        (in_sample if in_calibration(run) else held_out).append(scored)

    print_table("calibration runs (in-sample: the planner was fitted on these)", in_sample)
    print_table("held-out runs (scored)", held_out)
    print_parts([*in_sample, *held_out])
    if skipped:
        print("\nnot scored:")
        for run, why in skipped:
            print(f"  {run['run_id']}  {'/'.join(model_of(run))} {run['layout']} "
                  f"{run['strategy']}: {why}")  # fmt: skip
    no_state = [s for s in held_out if s.m.state_bytes is None]
    if no_state:
        print(f"\n{len(no_state)} held-out run(s) stored no tensor-counted state (stored before "
              "schema version 7): scored on step time only")  # fmt: skip

    print("\nmedian |error| per category (held out)")
    print(f"{'category':14} {'runs':>4} {'step time':>10} {'memory':>8}")
    by_category: dict[str, list[Scored]] = defaultdict(list)
    for s in held_out:
        by_category[s.category].append(s)
    for category in [*EXPECTED, *sorted(set(by_category) - set(EXPECTED))]:
        rows = by_category.get(category, [])
        if not rows:
            print(f"{category:14} {0:>4} {'no runs stored':>19}")
            continue
        t = median_abs(s.time_error for s in rows)
        mem = median_abs(s.memory_error for s in rows)
        print(f"{category:14} {len(rows):>4} {pct(t).lstrip('+'):>10} {pct(mem).lstrip('+'):>8}")

    print("\ngoals (median |error| over every held-out run)")
    errors = {
        "step time": median_abs(s.time_error for s in held_out),
        "memory": median_abs(s.memory_error for s in held_out),
    }
    for what, goal in GOALS.items():
        value = errors[what]
        if value is None:
            print(f"  {what}: no held-out run to score")
            continue
        verdict = "met" if value <= goal else "missed"
        print(f"  {what}: {value:.1%} (goal ≤ {goal:.0%}): {verdict}")
    missing = [k for k in EXPECTED if k not in by_category]
    if missing:
        print(f"  not scored, no runs stored: {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
