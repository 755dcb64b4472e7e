"""`greenbench plan --calibrate`: the planner's figures fitted from runs stored for this host.

From the ``ok`` GPU runs of one device type on this host (the store's `list_runs` and
`get_run`, so no SQL lives here):

* α and β per link, by least squares over the communication records: a record of ``calls``
  calls of ``op`` over ``p`` ranks moving ``bytes`` in all (an all-gather's gathered output, a
  reduce-scatter's input, an all-reduce's tensor, a message: the ``n`` of `greenbench.plan.comm`)
  spent ``seconds − wait_s`` transferring, which the model prices at
  ``calls·a(op,p)·α + b(op,p)·bytes·β``. Groups inside one node fit the fast link, groups across
  nodes the network. A link needs records of at least two different message sizes (else α and
  β cannot be told apart); α below zero is refitted at zero, and a fit with β ≤ 0 is dropped.
* sustained FLOP/s: per run, the ranks' analytic FLOPs over their compute seconds (window time
  minus communication); the median over runs.
* power: per repeat with a **measured** energy figure, the mean watts per device
  ``energy / seconds / devices`` is ``(1−w)·busy + w·idle`` with ``w`` the stored wait fraction
  and ``idle`` the stored idle power per device, solved for ``busy``; GPU energy where stored,
  else the gross energy. Medians over runs. Estimated energy is never fitted.

Each fitted figure says how many runs stand behind it; figures nothing fits stay as the GPU
table and the assumptions give them. When nothing at all can be fitted, one line and exit 2.
"""

from __future__ import annotations

import math
import socket
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from greenbench.errors import SpecError
from greenbench.hardware import gpus
from greenbench.plan.comm import OPS, Link, coefficients
from greenbench.plan.device import Calibration
from greenbench.vocabulary import DEGREES, MESH_ORDER


def stored_runs(
    db: Path, label: str, host: str | None = None, **filters: Any
) -> list[dict[str, Any]]:
    """Every ok GPU run of the device type ``label`` on ``host`` (default: this one), in full
    (`greenbench.store.get_run`); ``filters`` are further ``runs`` column = value."""
    from greenbench.store import get_run, list_runs

    if not Path(db).is_file():
        raise SpecError(f"no results database at {db}: run benchmarks first, or pass --db PATH")
    host = host or socket.gethostname()
    runs = list_runs(db, limit=None, status="ok", host=host, device="cuda", **filters)
    ids = [r.run_id for r in runs.itertuples() if gpus.gpu_label(str(r.device_type)) == label]
    return [get_run(db, run_id) for run_id in ids]


def _group_size(run: dict[str, Any], dim: str) -> int:
    if dim in DEGREES and run.get(dim):
        return int(run[dim])
    return int(run["nproc"]) * int(run["nnodes"])


def _crosses_nodes(run: dict[str, Any], dim: str) -> bool:
    """Whether a ``dim`` group of ``run`` spans nodes (ranks numbered along `MESH_ORDER`)."""
    if int(run["nnodes"]) == 1:
        return False
    if dim not in DEGREES:
        return True
    inner = math.prod(int(run.get(d) or 1) for d in MESH_ORDER[MESH_ORDER.index(dim) + 1 :])
    return inner * _group_size(run, dim) > int(run["nproc"])


def fit_link(rows: list[tuple[float, float, float]]) -> Link | None:
    """(α, β) from rows of (α multiplier, β·bytes multiplier, transfer seconds), or None when
    the rows cannot tell them apart or give no positive β."""
    x = np.array([(a, b) for a, b, _ in rows], dtype=float)
    y = np.array([t for _, _, t in rows], dtype=float)
    if len(rows) < 2 or np.linalg.matrix_rank(x) < 2:
        return None
    (alpha, beta), *_ = np.linalg.lstsq(x, y, rcond=None)
    if alpha < 0:
        alpha, beta = 0.0, float(x[:, 1] @ y / (x[:, 1] @ x[:, 1]))
    if beta <= 0:
        return None
    return Link(float(alpha), float(beta))


def _links(runs: list[dict[str, Any]]) -> dict[str, tuple[Link, int]]:
    rows: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    used: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        for c in run.get("comm_records", []):
            p = _group_size(run, c["dim"])
            if c["op"] not in OPS or c["calls"] < 1 or (p < 2 and c["op"] not in ("send", "recv")):
                continue
            a, b = coefficients(c["op"], p)
            link = "network" if _crosses_nodes(run, c["dim"]) else "fast"
            rows[link].append((c["calls"] * a, b * c["bytes"], c["seconds"] - c["wait_s"]))
            used[link].add(run["run_id"])
    fitted = {}
    for link, link_rows in rows.items():
        found = fit_link(link_rows)
        if found is not None:
            fitted[link] = (found, len(used[link]))
    return fitted


def _sustained(runs: list[dict[str, Any]]) -> list[float]:
    values = []
    for run in runs:
        ranks = [r for r in run.get("rank_results", []) if r.get("flops") and r.get("compute_s")]
        if ranks:
            values.append(sum(r["flops"] for r in ranks) / sum(r["compute_s"] for r in ranks))
    return values


def _power(runs: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    busy, idle = [], []
    for run in runs:
        devices = int(run["nproc"]) * int(run["nnodes"])
        run_busy, run_idle = [], []
        for r in run.get("results", []):
            energy = r.get("energy_gpu_j") or r.get("energy_j")
            if not r.get("energy_measured") or not energy or not r.get("seconds"):
                continue
            if r.get("idle_power_w") is None:
                continue
            mean_w = energy / r["seconds"] / devices
            idle_w = r["idle_power_w"] / devices
            w = min(max(float(r.get("wait_fraction") or 0.0), 0.0), 0.95)
            run_busy.append((mean_w - w * idle_w) / (1 - w))
            run_idle.append(idle_w)
        if run_busy:
            busy.append(statistics.median(run_busy))
            idle.append(statistics.median(run_idle))
    return busy, idle


def calibrate(db: Path, device_type: str, host: str | None = None) -> Calibration:
    """Fit what the stored runs of ``device_type`` on ``host`` allow; SpecError (exit 2) when
    they fit nothing."""
    label = gpus.gpu_label(device_type)
    if label is None:
        raise SpecError(
            f"unknown device type {device_type!r}; choose one of: {', '.join(gpus.DEVICE_TYPES)}"
        )
    where = host or socket.gethostname()
    runs = stored_runs(db, label, host)
    links = _links(runs)
    sustained = _sustained(runs)
    busy, idle = _power(runs)
    if not (links or sustained or busy):
        raise SpecError(
            f"too little to calibrate: {len(runs)} ok {label} GPU run(s) of host {where!r} in "
            f"{db} ({'none' if not runs else 'no FLOP counts, measured energy or communication'})"
            "; run a workload on this host's GPUs first, or plan without --calibrate"
        )
    counts = {name: n for name, (_, n) in links.items()}
    if sustained:
        counts["sustained_flops"] = len(sustained)
    if busy:
        counts["busy_w"] = counts["idle_w"] = len(busy)
    return Calibration(
        fast=links["fast"][0] if "fast" in links else None,
        network=links["network"][0] if "network" in links else None,
        sustained_flops=statistics.median(sustained) if sustained else None,
        busy_w=statistics.median(busy) if busy else None,
        idle_w=statistics.median(idle) if idle else None,
        runs=counts,
    )
