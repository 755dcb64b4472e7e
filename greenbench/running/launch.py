"""Runs RunSpecs (each in child processes, see execute.py); collects and stores results.

The launcher is the only writer of the database. For each configuration it inserts a `running`
row, executes, aggregates the ranks' windows into one row per repeat and finishes the row in one
short transaction. A failing configuration is stored as `failed` (with the rank and its error)
and the suite goes on; Ctrl-C marks the current one `interrupted`, keeps the rest and re-raises.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenbench.errors import GreenbenchError, WorkerFailed
from greenbench.results import RunOutcome
from greenbench.running.execute import execute, failed_rank_of, threads_per_rank
from greenbench.running.resolve import resolve_spec
from greenbench.vocabulary import RunSpec


@dataclass(slots=True)
class RunSummary:
    """What happened to each configuration of one `greenbench run`."""

    run_ids: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(s != "ok" for s in self.statuses)


def peak_flops_for(spec: RunSpec) -> tuple[float | None, str | None, str]:
    """(peak FLOP/s per device, where it came from, device type name) for MFU."""
    from greenbench.hardware import cpu_peak, gpus, machine

    s = spec.settings
    if s["device"] == "cuda":
        import torch

        name = torch.cuda.get_device_name(0)
        found = gpus.gpu_peak_flops(name, s["precision"])
        if found is None:
            return None, None, name
        return found[0], found[1], name
    import torch

    dtype = torch.bfloat16 if s["precision"] == "bf16" else torch.float32
    peak = cpu_peak.cpu_gemm_peak_flops(threads_per_rank(s["nproc"]), dtype)
    return peak, cpu_peak.CPU_GEMM_SOURCE, f"cpu:{machine.cpu_model()}"


def run_row(
    spec: RunSpec,
    run_id: str,
    device_type: str,
    fingerprint: dict[str, Any],
    carbon: tuple[float, str],
) -> dict[str, Any]:
    from greenbench.models import FAMILIES
    from greenbench.store import config_key

    s = spec.settings
    layout = spec.layout
    kernels = FAMILIES[s["model.family"]].kernels_used(s["model.scan"])
    return {
        "run_id": run_id,
        "suite": spec.suite,
        "workload": spec.workload,
        "config_name": spec.name,
        "config_key": config_key(spec.identity()),
        "config": json.dumps(spec.to_dict(), sort_keys=True),
        "model_family": s["model.family"],
        "model_size": s["model.size"],
        "strategy": s["strategy"],
        "layout": layout.text,
        **layout.degrees(),
        "kernels": json.dumps(kernels, sort_keys=True),
        "rank_cpu_quota": s["emulate.rank_cpu_quota"] == "on",
        "device": s["device"],
        "device_type": device_type,
        "nproc": s["nproc"],
        "nnodes": s["nnodes"],
        "precision": s["precision"],
        "seq_len": s["data.seq_len"],
        "lengths": s["data.lengths"],
        "region": s["energy.region"],
        "carbon_intensity_g_per_kwh": carbon[0],
        "status": "running",
        "label": spec.label,
        "git_sha": fingerprint.get("git_sha"),
        "started_at": dt.datetime.now(dt.timezone.utc).replace(tzinfo=None),
        "host": fingerprint.get("host"),
        "hardware": json.dumps(fingerprint.get("hardware", fingerprint), default=str),
        "versions": json.dumps(fingerprint.get("versions", {}), default=str),
    }


class IdlePower:
    """Idle power of this node, sampled once per energy source and reused for the session."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], float | None] = {}

    def get(self, spec: RunSpec) -> float | None:
        from greenbench.energy import select_meter

        s = spec.settings
        if s["energy.idle_s"] <= 0:
            return None
        key = (s["device"], s["energy.source"])
        if key not in self._cache:
            meter = select_meter(
                s["device"],
                None if s["energy.source"] == "auto" else s["energy.source"],
                gpu_indices=list(range(s["nproc"])) if s["device"] == "cuda" else [],
                local_rank=0,
            )
            try:
                self._cache[key] = meter.idle_power_w(s["energy.idle_s"])
            finally:
                meter.close()
        return self._cache[key]


def run_specs(
    specs: list[RunSpec],
    db_path: Path,
    *,
    on_event: Callable[[str, RunSpec, dict[str, Any]], None] | None = None,
    rdzv: dict[str, Any] | None = None,
    resume: bool = False,
) -> RunSummary:
    """Run every spec, storing each as it finishes. ``on_event`` drives progress display.

    With ``resume``, configurations that already have an ``ok`` run with the same identity and
    label in the database are skipped (reported as ``skipped``), so an interrupted suite can be
    finished without repeating what was stored.
    """
    from greenbench.energy.carbon import carbon_intensity_g_per_kwh
    from greenbench.hardware.fingerprint import fingerprint as machine_fingerprint
    from greenbench.metrics import aggregate_repeat
    from greenbench.running.cpu_quota import sweep_stale
    from greenbench.store import Store, config_key, new_run_id

    emit = on_event or (lambda *_: None)
    specs = [resolve_spec(sp) for sp in specs]
    sweep_stale()  # quota groups a killed launcher left behind
    if rdzv and rdzv.get("node_rank"):
        return follow_specs(specs, rdzv, emit)
    store = Store(db_path)  # validates the file before any run starts
    fingerprint = machine_fingerprint()
    idle = IdlePower()
    summary = RunSummary()
    done = finished_configs(db_path) if resume else set()
    for spec in specs:
        s = spec.settings
        if (config_key(spec.identity()), spec.label) in done:
            emit("skip", spec, {})
            continue
        carbon = carbon_intensity_g_per_kwh(s["energy.region"])
        peak, peak_source, device_type = peak_flops_for(spec)
        run_id = new_run_id()
        store.begin_run(run_row(spec, run_id, device_type, fingerprint, carbon))
        emit("start", spec, {"run_id": run_id})
        status, error = "ok", None
        try:
            idle_w = idle.get(spec)
            execution = execute(spec, rdzv, keep_logs=logs_dir_for(db_path) / run_id)
            ranks = execution.ranks
            world = s["nproc"] * s["nnodes"]
            repeats = [
                aggregate_repeat(
                    [r for r in ranks if r.repeat == k],
                    idle_power_w=idle_w,
                    peak_flops=peak,
                    n_devices=world,
                    carbon_g_per_kwh=carbon[0],
                )
                for k in range(s["repeats"])
            ]
            outcome = RunOutcome(
                status="ok",
                repeats=repeats,
                ranks=ranks,
                peak_flops=peak,
                peak_flops_source=peak_source,
                warnings=execution.warnings,
                log_path=execution.log_dir,
            )
        except KeyboardInterrupt:
            store.mark_run(run_id, "interrupted", "interrupted by the user (SIGINT/SIGTERM)")
            emit("end", spec, {"run_id": run_id, "status": "interrupted"})
            raise
        except WorkerFailed as exc:
            status, error = "failed", str(exc)
            outcome = RunOutcome(
                status="failed",
                error=error,
                failed_rank=exc.rank if exc.rank is not None else failed_rank_of(error),
                error_tail=exc.tail,
                log_path=exc.log_dir,
            )
        except GreenbenchError as exc:
            status, error = "failed", str(exc)
            outcome = RunOutcome(status="failed", error=error)
        store.finish_run(run_id, outcome)
        summary.run_ids.append(run_id)
        summary.statuses.append(status)
        summary.names.append(spec.name)
        summary.errors.append(error)
        emit(
            "end",
            spec,
            {"run_id": run_id, "status": status, "error": error, "repeats": outcome.repeats},
        )
    return summary


def logs_dir_for(db_path: Path) -> Path:
    """Where the worker logs of failed (or warned) runs are kept: ``<db stem>-logs/<run id>/``
    beside the database, so `greenbench show` can point to them."""
    db_path = Path(db_path)
    return db_path.absolute().parent / f"{db_path.stem}-logs"


def follow_specs(
    specs: list[RunSpec],
    rdzv: dict[str, Any],
    emit: Callable[[str, RunSpec, dict[str, Any]], None],
) -> RunSummary:
    """A node other than node 0 of a multi-node run: start this node's ranks for every spec and
    store nothing. Global rank 0 (on node 0) gathers every rank's results, and node 0's launcher
    writes them, so the database has one writer however many nodes take part."""
    summary = RunSummary()
    for spec in specs:
        emit("start", spec, {"run_id": f"node {rdzv['node_rank']}"})
        status, error = "ok", None
        try:
            execute(spec, rdzv)
        except KeyboardInterrupt:
            emit("end", spec, {"run_id": "", "status": "interrupted"})
            raise
        except GreenbenchError as exc:
            status, error = "failed", str(exc)
        summary.run_ids.append("")
        summary.statuses.append(status)
        summary.names.append(spec.name)
        summary.errors.append(error)
        emit("end", spec, {"run_id": "", "status": status, "error": error, "repeats": []})
    return summary


def finished_configs(db_path: Path) -> set[tuple[str, str | None]]:
    """(config_key, label) of every run stored with status ok."""
    from greenbench.store import read_frame, views

    if not Path(db_path).exists():
        return set()
    frame = read_frame(db_path, views.FINISHED_CONFIGS)
    return {
        (r.config_key, None if r.label is None or r.label != r.label else r.label)
        for r in frame.itertuples()
    }


def install_interrupt_handlers() -> None:
    """SIGINT and SIGTERM both raise KeyboardInterrupt, so the current run is marked interrupted.

    SIGINT is set explicitly: a process started in the background by a non-interactive shell
    (``cmd &`` in a script, many CI runners) inherits SIGINT *ignored*, and Python then leaves it
    ignored, so ``kill -INT`` would do nothing."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, handler)
