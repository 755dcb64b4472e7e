"""`greenbench plan --calibrate`: the planner's figures fitted from runs stored for this host.

From the ``ok`` runs of one device type on this host (the store's `list_runs` and `get_run`, so
no SQL lives here): the GPU runs of a GPU type, or with ``--device-type host`` the CPU runs of
this host (`greenbench.planner.host`), each rank a device with its share of the cores:

* α and β per link, by least squares over the communication records: a record of ``calls``
  calls of ``op`` over ``p`` ranks moving ``bytes`` in all (an all-gather's gathered output, a
  reduce-scatter's input, an all-reduce's tensor, a message: the ``n`` of
  `greenbench.planner.alpha_beta`)
  spent ``seconds − wait_s`` transferring, which the model prices at
  ``calls·a(op,p)·α + b(op,p)·bytes·β``. Groups inside one node fit the fast link, groups across
  nodes the network. A link needs records of at least two different message sizes (else α and
  β cannot be told apart); α below zero is refitted at zero, and a fit with β ≤ 0 is dropped.
  DDP records only the tail of its all-reduces that backward did not hide (they run beside
  backward, `greenbench.strategies.ddp`; on CPU and, since it adds no barrier, on GPU too), not
  a transfer: its records (``dp_replicate``, `DDP_TAIL`) are left out of the fit. gloo's copies and
  reductions are CPU work done on the rank's share of the cores, so a rank under a quota of half
  a core transfers at about half the speed (measured here: 1.4 ns/B for an all-gather at 2 ranks
  of one core each, 3.1 ns/B at 4 ranks of half a core): CPU transfer seconds are fitted per
  core (times the rank's cores) and `greenbench.planner.host` divides them back. Records of a
  single message size per call (one model's FSDP units) cannot separate α from β; on a CPU
  host, which has no datasheet bandwidth to fall back on, β is then fitted alone with α = 0
  (`fit_bandwidth`), and the calibration's note says so.
* sustained FLOP/s: per run, the ranks' analytic FLOPs over all their compute seconds (window
  time minus communication; a hybrid layout counts each token's FLOPs on one rank), per device:
  per GPU, per core on CPU (over the cores each rank had,
  `greenbench.planner.host.cores_per_rank`); the median over runs.
* per model family, the rates of its matrix products and of its kernel (attention, a scan),
  from its single-process and data-parallel runs (`greenbench.planner.family_fit`), which
  price that family's compute in place of the one sustained figure; on a CPU host also a
  process's memory beyond the predicted tensors (its interpreter and libraries), from the same
  runs' peak resident sets;
* power: per repeat with a **measured** energy figure, the mean watts per device
  ``energy / seconds / devices`` is ``(1−w)·busy + w·idle`` with ``w`` the stored wait fraction
  and ``idle`` the stored idle power per device, solved for ``busy``; GPU energy where stored,
  else the gross energy; per core on CPU. Medians over runs. Estimated energy is never fitted.

Each fitted figure says how many runs stand behind it; figures nothing fits stay as the GPU
table, the host's facts and the assumptions give them. When nothing at all can be fitted, one
line and exit 2. `fit` does the fitting on any list of runs (the planner benchmark fits a
chosen subset and scores the rest).
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
from greenbench.planner.alpha_beta import OPS, Link, coefficients
from greenbench.planner.device import Calibration
from greenbench.planner.family_fit import fit_family_rates, fit_process_overhead
from greenbench.planner.host import HOST, cores_per_rank, run_cores
from greenbench.vocabulary import DEGREES, MESH_ORDER

#: the dimension whose records are DDP's exposed all-reduce tail, never a transfer
DDP_TAIL = "dp_replicate"


def stored_runs(
    db: Path, label: str, host: str | None = None, **filters: Any
) -> list[dict[str, Any]]:
    """Every ok run of the device type ``label`` on ``host`` (default: this one), in full
    (`greenbench.store.get_run`): a GPU label of the GPU table, a CPU's stored device type
    (``cpu:<model>``), or `HOST` for every CPU run; ``filters`` are further ``runs`` column =
    value."""
    from greenbench.store import get_run, list_runs

    if not Path(db).is_file():
        raise SpecError(f"no results database at {db}: run benchmarks first, or pass --db PATH")
    host = host or socket.gethostname()
    cpu = label == HOST or label.startswith("cpu:")
    device = "cpu" if cpu else "cuda"
    runs = list_runs(db, limit=None, status="ok", host=host, device=device, **filters)
    if label == HOST:
        ids = list(runs.run_id)
    elif cpu:
        ids = [r.run_id for r in runs.itertuples() if str(r.device_type) == label]
    else:
        ids = [r.run_id for r in runs.itertuples() if gpus.gpu_label(str(r.device_type)) == label]
    return [get_run(db, run_id) for run_id in ids]


def device_share(run: dict[str, Any]) -> float:
    """What one rank of ``run`` is of the calibration's device: one GPU, or its cores on CPU."""
    if run.get("device") != "cpu":
        return 1.0
    cores = run_cores(run) or 1
    return cores_per_rank(cores, int(run["nproc"]))


def mesh_dims(dim: str) -> tuple[str, ...]:
    """The layout degrees a record's ``dim`` names: one (``tp``), several joined by ``_`` for a
    flattened group (the hybrid strategy's FSDP over ``dp_shard_cp``), or none (``world``)."""
    found: list[str] = []
    rest = dim
    while rest:
        name = next((d for d in DEGREES if rest == d or rest.startswith(f"{d}_")), None)
        if name is None:
            return ()
        found.append(name)
        rest = rest[len(name) + 1 :]
    return tuple(found)


def _group_size(run: dict[str, Any], dim: str) -> int:
    dims = mesh_dims(dim)
    if dims and all(run.get(d) for d in dims):
        return math.prod(int(run[d]) for d in dims)
    return int(run["nproc"]) * int(run["nnodes"])


def _crosses_nodes(run: dict[str, Any], dim: str) -> bool:
    """Whether a ``dim`` group of ``run`` spans nodes (ranks numbered along `MESH_ORDER`)."""
    if int(run["nnodes"]) == 1:
        return False
    dims = mesh_dims(dim)
    if not dims:
        return True
    outer = min(dims, key=MESH_ORDER.index)  # a flattened group spans its outermost dim's span
    inner = math.prod(int(run.get(d) or 1) for d in MESH_ORDER[MESH_ORDER.index(outer) + 1 :])
    return inner * int(run.get(outer) or 1) > int(run["nproc"])


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


def fit_bandwidth(rows: list[tuple[float, float, float]]) -> Link | None:
    """β alone (α = 0) from the same rows, for records of one message size; None without a
    positive β."""
    bytes_terms = np.array([b for _, b, _ in rows], dtype=float)
    seconds = np.array([t for _, _, t in rows], dtype=float)
    if not rows or not bytes_terms @ bytes_terms > 0:
        return None
    beta = float(bytes_terms @ seconds / (bytes_terms @ bytes_terms))
    return Link(0.0, beta) if beta > 0 else None


def _links(runs: list[dict[str, Any]]) -> tuple[dict[str, tuple[Link, int]], dict[str, str]]:
    """Fitted links with the runs behind each, and notes on links fitted by bandwidth alone."""
    rows: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    used: dict[str, set[str]] = defaultdict(set)
    cpu = False
    for run in runs:
        share = device_share(run)
        cpu = cpu or run.get("device") == "cpu"
        for c in run.get("comm_records", []):
            p = _group_size(run, c["dim"])
            if c["op"] not in OPS or c["calls"] < 1 or (p < 2 and c["op"] not in ("send", "recv")):
                continue
            if c["dim"] == DDP_TAIL:
                continue  # the exposed tail of an all-reduce, not its transfer (docstring)
            a, b = coefficients(c["op"], p)
            link = "network" if _crosses_nodes(run, c["dim"]) else "fast"
            transfer_s = (c["seconds"] - c["wait_s"]) * share  # per core on CPU (docstring)
            rows[link].append((c["calls"] * a, b * c["bytes"], transfer_s))
            used[link].add(run["run_id"])
    fitted, notes = {}, {}
    for link, link_rows in rows.items():
        found = fit_link(link_rows)
        if found is None and cpu:
            found = fit_bandwidth(link_rows)
            if found is not None:
                notes[link] = (
                    "bandwidth only (α = 0): the records' message sizes cannot tell α from β"
                )
        if found is not None:
            fitted[link] = (found, len(used[link]))
    return fitted, notes


def _sustained(runs: list[dict[str, Any]]) -> list[float]:
    values = []
    for run in runs:
        # every rank's compute seconds, whether or not it counted FLOPs: a hybrid layout counts
        # each token's FLOPs once, on the rank at the origin of tp, pp and cp
        ranks = [r for r in run.get("rank_results", []) if r.get("compute_s")]
        flops = sum(r.get("flops") or 0.0 for r in ranks)
        if flops > 0:
            per_rank = flops / sum(r["compute_s"] for r in ranks)
            values.append(per_rank / device_share(run))
    return values


def _power(runs: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    busy, idle = [], []
    for run in runs:
        devices = int(run["nproc"]) * int(run["nnodes"]) * device_share(run)
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


def fit(runs: list[dict[str, Any]]) -> Calibration:
    """What ``runs`` (`get_run` dicts of one device type) allow to fit; figures they cannot fit
    are None, and ``runs`` is empty when nothing could be fitted."""
    links, notes = _links(runs)
    sustained = _sustained(runs)
    busy, idle = _power(runs)
    rates = fit_family_rates(runs, device_share)
    overhead, overhead_runs = fit_process_overhead(runs)
    counts = {name: n for name, (_, n) in links.items()}
    if sustained:
        counts["sustained_flops"] = len(sustained)
    if busy:
        counts["busy_w"] = counts["idle_w"] = len(busy)
    for family, rate in rates.items():
        counts[f"{family} FLOP/s"] = rate.runs
    if overhead is not None:
        counts["process_overhead_b"] = overhead_runs
    return Calibration(
        fast=links["fast"][0] if "fast" in links else None,
        network=links["network"][0] if "network" in links else None,
        sustained_flops=statistics.median(sustained) if sustained else None,
        busy_w=statistics.median(busy) if busy else None,
        idle_w=statistics.median(idle) if idle else None,
        runs=counts,
        notes=notes,
        family_rates=rates,
        process_overhead_b=overhead,
    )


def calibrate(db: Path, device_type: str, host: str | None = None) -> Calibration:
    """Fit what the stored runs of ``device_type`` (a GPU type, or `HOST`) on ``host`` allow;
    SpecError (exit 2) when they fit nothing."""
    if device_type == HOST:
        label, kind = HOST, "CPU"
    else:
        found = gpus.gpu_label(device_type)
        if found is None:
            raise SpecError(
                f"unknown device type {device_type!r}; choose {HOST} (this host's CPU) or one "
                f"of: {', '.join(gpus.DEVICE_TYPES)}"
            )
        label, kind = found, f"{found} GPU"
    where = host or socket.gethostname()
    runs = stored_runs(db, label, host)
    c = fit(runs)
    if not c.runs:
        raise SpecError(
            f"too little to calibrate: {len(runs)} ok {kind} run(s) of host {where!r} in "
            f"{db} ({'none' if not runs else 'no FLOP counts, measured energy or communication'})"
            f"; run a workload on this host's {'CPU' if label == HOST else 'GPUs'} first, or "
            "plan without --calibrate"
        )
    return c
