"""Fitting the per-family rates (`greenbench.planner.rates`) and a process's memory overhead
from stored runs.

Rates: from the ``ok`` runs of full rows whose layout is a single process or data parallelism
alone (`greenbench.planner.runs.calibrates`: no tensor, pipeline or context split, whose ranks
run other kernels and wait on each other), per model family. Each run gives one equation in
the two inverse rates of its family,

    compute seconds per step × cores  =  dense · a + kernel · b,

with ``dense`` and ``kernel`` the FLOPs one rank computes per step by term
(`greenbench.planner.rates.device_work` times the rank's tokens), the compute seconds the
ranks' mean per step (median over repeats), and ``cores`` the rank's cores on a CPU host (1 on
a GPU), so the rates are per core there. The fit minimises the relative error of every run
(each row divided by its seconds), with ``a, b ≥ 0`` (non-negative least squares). The two
terms are told apart only where the runs' kernel share differs (a Transformer at two sequence
lengths); where it does not (one sequence length, or a scan whose FLOPs per token do not grow
with the sequence) one rate prices both terms of the family, and the rate's note says so.
A family's runs of several kernel backends (Mamba's native and torch scans) are fitted for the
backend most of them ran.

Process overhead: on a CPU host a rank's peak resident set holds the interpreter, torch and its
allocator's caches besides the tensors the planner predicts; the overhead is the median over
the same runs of the measured peak minus the predicted peak (`Memory.total_b`), and the
planner then predicts a process's peak as the overhead plus its tensors. GPU runs store the
peak allocated device memory, which has no such overhead: none is fitted.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

import numpy as np
from scipy.optimize import nnls

from greenbench.errors import GreenbenchError
from greenbench.models import FAMILIES, model_preset
from greenbench.planner.memory import per_device
from greenbench.planner.rates import FamilyRate, device_work
from greenbench.planner.runs import (
    PREDICTED_LENGTHS,
    calibrates,
    compute_seconds_per_step,
    process_peak_bytes,
    run_batch,
    run_kernel,
    run_layout,
)

#: kernel shares (kernel / dense FLOPs) within this factor of each other cannot tell the terms
#: apart: one rate then prices both
SEPARABLE_SPREAD = 1.10


def _calibrating(run: dict[str, Any]) -> bool:
    return (
        run.get("lengths", PREDICTED_LENGTHS) == PREDICTED_LENGTHS
        and run.get("model_family") in FAMILIES
        and calibrates(run_layout(run))
    )


def _shape(run: dict[str, Any]) -> Any:
    try:
        return model_preset(str(run["model_family"]), str(run["model_size"]))
    except GreenbenchError:
        return None


def _row(run: dict[str, Any], share: float) -> tuple[float, float, float] | None:
    """(dense FLOPs, kernel FLOPs, compute seconds × cores) of one rank per step."""
    shape = _shape(run)
    seconds = compute_seconds_per_step(run)
    if shape is None or not seconds:
        return None
    layout, batch = run_layout(run), run_batch(run)
    work = device_work(shape, layout, batch.seq_len)
    tokens = batch.tokens / layout.dp
    return tokens * work.dense, tokens * work.kernel, seconds * share


def fit_rates(rows: list[tuple[float, float, float]]) -> tuple[float, float, str]:
    """(dense rate, kernel rate, note) from rows of (dense FLOPs, kernel FLOPs, seconds) by
    relative non-negative least squares (module docstring); one rate for both where the rows'
    kernel shares cannot tell them apart."""
    x = np.array([(d / t, k / t) for d, k, t in rows], dtype=float)
    shares = [k / d for d, k, _ in rows if d > 0]
    spread = max(shares) / min(shares) if shares and min(shares) > 0 else 1.0
    if len(rows) >= 2 and spread > SEPARABLE_SPREAD:
        (a, b), _ = nnls(x, np.ones(len(rows)))
        if a > 0 and b > 0:
            return 1 / a, 1 / b, ""
        why = "the two-term fit left one term free"
    else:
        why = "its runs' kernel share does not vary (one sequence length, or a kernel whose "
        why += "FLOPs per token do not grow with it)"
    total = x.sum(axis=1)
    inverse = float(total.sum() / (total @ total))  # one rate: least relative squares
    rate = 1 / inverse
    return rate, rate, f"one rate for matmuls and kernel: {why}"


def fit_family_rates(
    runs: list[dict[str, Any]], share_of: Any = lambda run: 1.0
) -> dict[str, FamilyRate]:
    """Per family, its rates from ``runs`` (`get_run` dicts; those that do not calibrate are
    passed over); ``share_of(run)`` is a rank's cores (1 per GPU)."""
    by_family: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if _calibrating(run):
            by_family[str(run["model_family"])].append(run)
    found = {}
    for family, family_runs in sorted(by_family.items()):
        kernels = Counter(run_kernel(r) for r in family_runs)
        kernel = kernels.most_common(1)[0][0]
        rows = [
            row
            for r in family_runs
            if run_kernel(r) == kernel and (row := _row(r, share_of(r))) is not None
        ]
        if not rows:
            continue
        dense, kernel_rate, note = fit_rates(rows)
        others = sorted(set(kernels) - {kernel})
        if others:
            note = "; ".join(filter(None, [note, f"runs of the {', '.join(others)} kernel "
                                           "left out"]))  # fmt: skip
        found[family] = FamilyRate(family, kernel, dense, kernel_rate, len(rows), note)
    return found


def fit_process_overhead(runs: list[dict[str, Any]]) -> tuple[float | None, int]:
    """(median bytes a CPU rank's peak holds beyond the predicted tensors, runs behind it);
    (None, 0) without a CPU run that calibrates and stored its peak."""
    overheads = []
    for run in runs:
        if run.get("device") != "cpu" or not _calibrating(run):
            continue
        shape, peak = _shape(run), process_peak_bytes(run)
        if shape is None or not peak:
            continue
        layout, batch = run_layout(run), run_batch(run)
        m = batch.microbatches(layout)
        if m is None:
            continue
        memory = per_device(
            shape, layout, micro_batch=batch.micro_batch, seq_len=batch.seq_len,
            activation_bytes=batch.activation_bytes, microbatches=m,
        )  # fmt: skip
        overheads.append(peak - memory.total_b)
    if not overheads:
        return None, 0
    return float(statistics.median(overheads)), len(overheads)
