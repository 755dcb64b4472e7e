"""What the planner reads of one stored run (a `greenbench.store.get_run` dict): its batch, its
layout, its measured step time, compute seconds and process peak, and which layouts calibrate.

Plain functions over the stored dict, shared by the calibration (`greenbench.planner.calibrate`,
`greenbench.planner.rates`), the comparison with predictions (`greenbench.planner.measured`) and
the planner's benchmark, so each figure is read one way.
"""

from __future__ import annotations

import statistics
from typing import Any

from greenbench.config import read_section
from greenbench.data.settings import DataSettings
from greenbench.planner.cost import Batch
from greenbench.vocabulary import Layout

PREDICTED_LENGTHS = "fixed"  #: the only length distribution the planner predicts


def run_batch(run: dict[str, Any]) -> Batch:
    """The batch ``run`` trained per optimizer step."""
    data = read_section(DataSettings, run["config"]["settings"])
    return Batch(
        seq_len=int(run["seq_len"]),
        global_batch=int(data.global_batch),
        micro_batch=int(data.micro_batch),
        precision=str(run["precision"]),
    )


def run_layout(run: dict[str, Any]) -> Layout:
    """The layout ``run`` ran (a legacy ``dpN`` read with its strategy)."""
    return Layout.parse(str(run["layout"]), strategy=run.get("strategy"))


def calibrates(layout: Layout) -> bool:
    """Whether a run of ``layout`` calibrates the per-family rates: a single process or data
    parallelism alone (no tensor, pipeline or context split, whose ranks run other kernels)."""
    return layout.tp == 1 and layout.pp == 1 and layout.cp == 1


def run_kernel(run: dict[str, Any]) -> str:
    """The sequence-mixing kernel ``run`` ran (its stored kernels: Mamba's scan backend, the
    Transformer's attention), ``"none"`` when it stored none."""
    kernels = run.get("kernels") or {}
    return str(kernels.get("scan") or kernels.get("attention") or "none")


def step_seconds(run: dict[str, Any]) -> float | None:
    """Median over repeats of the window's seconds over its steps."""
    steps = [
        r["seconds"] / len(r["step_times_s"])
        for r in run.get("results", [])
        if r.get("step_times_s") and r.get("seconds")
    ]
    return statistics.median(steps) if steps else None


def compute_seconds_per_step(run: dict[str, Any]) -> float | None:
    """Median over repeats of a rank's compute seconds per step (the mean of the ranks)."""
    by_repeat: dict[int, list[float]] = {}
    for r in run.get("rank_results", []):
        steps = len(r.get("step_times_s") or [])
        if r.get("compute_s") and steps:
            by_repeat.setdefault(int(r["repeat"]), []).append(r["compute_s"] / steps)
    values = [statistics.fmean(v) for v in by_repeat.values()]
    return statistics.median(values) if values else None


def process_peak_bytes(run: dict[str, Any]) -> float | None:
    """The peak the run's processes reached, median over repeats of the busiest rank's: the
    peak resident set of a CPU rank (``VmHWM``), the peak allocated device memory of a GPU
    rank (`greenbench.rank.training.peak_memory_bytes`)."""
    peaks = [r["peak_mem_bytes"] for r in run.get("results", []) if r.get("peak_mem_bytes")]
    return float(statistics.median(peaks)) if peaks else None
