"""Runs RunSpecs (each in child processes, see execute.py); collects and stores results.

The launcher is the only writer of the database. For each configuration it inserts a `running`
row, executes, aggregates the ranks' windows into one row per repeat and finishes the row in one
short transaction. It reads every block of the database before the first configuration trains
(a damaged file is refused), and a finished run whose write cannot get the database's lock
(another process holds it past ``$GREENBENCH_LOCK_WAIT_S``) goes to a result shard beside it,
merged by the next run or `greenbench merge`: a measurement is never lost to a lock. A failing
configuration is stored as `failed` (with the rank and its error) and the suite goes on; Ctrl-C
marks the current one `interrupted`, keeps the rest and re-raises. A simulated configuration
(`greenbench.running.simulated`) launches no worker: it is simulated, stored the same way and
marked simulated, with no preflight, CPU peak or idle-power sampling.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenbench.errors import DoesNotFit, GreenbenchError, WorkerFailed
from greenbench.processes import stop_handler
from greenbench.results import RankResult, RepeatResult, RunOutcome
from greenbench.running import simulated, user_run
from greenbench.running.contention import ContentionWatch
from greenbench.running.execute import (
    execute,
    failed_rank_of,
    sweep_stale_temp,
    threads_per_rank,
)
from greenbench.running.power_limits import LimitPlan, held_limit, plan_limits, row_columns
from greenbench.running.preflight import (
    check_energy_sources,
    why_it_cannot_fit,
    why_too_few_devices,
)
from greenbench.running.rank_meters import check_node_meters
from greenbench.running.resolve import resolve_spec
from greenbench.settings import spec_key
from greenbench.settings.runspec import RunSpec
from greenbench.vocabulary import is_user_workload


@dataclass(slots=True)
class RunSummary:
    """What happened to each configuration of one `greenbench run`."""

    run_ids: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)

    @property
    def failed(self) -> int:
        """Configurations that ran and did not finish ok (skipped ones did not run)."""
        return sum(s not in ("ok", "skipped") for s in self.statuses)


def nothing_can_run(reasons: list[str], shown: int = 3) -> str:
    """One line for a suite none of whose configurations can run here: each distinct reason
    with how many configurations it stops, the commonest first."""
    from collections import Counter

    counted = Counter(reasons).most_common()
    parts = [f"{n} × {why}" if n > 1 else why for why, n in counted[:shown]]
    if len(counted) > shown:
        parts.append(f"and {len(counted) - shown} other reason(s)")
    return (
        f"none of the {len(reasons)} configurations can run on this machine: "
        + "; ".join(parts)
        + " (--force runs them anyway)"
    )


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
    peak = cpu_peak.cpu_gemm_peak_flops(*_cpu_peak_args(spec))
    return peak, cpu_peak.CPU_GEMM_SOURCE, f"cpu:{machine.cpu_model()}"


def trusted_peak(spec: RunSpec, peak: float | None) -> float | None:
    """``peak`` when a time estimate may rest on it: a datasheet figure, or a CPU calibration
    taken on a quiet machine. One taken under load comes out low and would overstate the
    time a run needs, so the up-front time check is skipped rather than trusted to it."""
    if peak is None or spec.settings["device"] == "cuda":
        return peak
    from greenbench.hardware import cpu_peak

    record = cpu_peak.calibration_record(*_cpu_peak_args(spec))
    return peak if record is not None and record.get("trusted") else None


def _cpu_peak_args(spec: RunSpec) -> tuple[int, Any]:
    """(intra-op threads per rank, torch dtype) the CPU peak of ``spec`` is calibrated for."""
    import torch

    s = spec.settings
    dtype = torch.bfloat16 if s["precision"] == "bf16" else torch.float32
    return threads_per_rank(s["nproc"]), dtype


def aggregate_checked(
    spec: RunSpec,
    ranks: list[RankResult],
    peak: float | None,
    peak_source: str | None,
    *,
    n_devices: int,
    idle_power_w: float | None,
    carbon_g_per_kwh: float | None,
    idle_sample_note: str = "",
) -> tuple[list[RepeatResult], float | None]:
    """Each repeat's row, and the peak its MFU is relative to.

    A run whose achieved FLOP/s per device beats a CPU calibration proves the calibration too
    low (e.g. taken while other processes held cores): it is measured again, once, now that the
    run's ranks have exited, and MFU recomputed against the new peak, each repeat noting it.
    Where the run still beats the peak (or beats a GPU datasheet figure), MFU is stored unknown
    with its reason (``metrics.checked_mfu``): never above 1, never clamped.
    """
    from dataclasses import replace

    from greenbench.aggregate import aggregate_repeat, exceeds_peak
    from greenbench.hardware import cpu_peak

    def aggregate(p: float | None) -> list[RepeatResult]:
        return [
            aggregate_repeat(
                [r for r in ranks if r.repeat == k],
                idle_power_w=idle_power_w,
                peak_flops=p,
                n_devices=n_devices,
                carbon_g_per_kwh=carbon_g_per_kwh,
                idle_sample_note=idle_sample_note,
            )
            for k in range(spec.settings["repeats"])
        ]

    repeats = aggregate(peak)
    beaten = [r for r in repeats if exceeds_peak(r.flops, r.seconds, peak, n_devices)]
    if not beaten or peak_source != cpu_peak.CPU_GEMM_SOURCE:
        return repeats, peak
    threads, dtype = _cpu_peak_args(spec)
    before = cpu_peak.describe(cpu_peak.calibration_record(threads, dtype))
    new_peak = cpu_peak.cpu_gemm_peak_flops(threads, dtype, recalibrate=True)
    after = cpu_peak.describe(cpu_peak.calibration_record(threads, dtype))
    achieved = max(r.flops / (r.seconds * n_devices) for r in beaten)
    note = (
        f"CPU peak re-measured after the run, which reached {achieved:.3g} FLOP/s per device, "
        f"above the calibrated {peak:.3g} ({before}); now {new_peak:.3g} ({after})"
    )
    return [
        replace(r, mfu_note="; ".join(filter(None, (r.mfu_note, note))))
        for r in aggregate(new_peak)
    ], new_peak


def run_row(
    spec: RunSpec,
    run_id: str,
    device_type: str,
    fingerprint: dict[str, Any],
    carbon: tuple[float, str],
) -> dict[str, Any]:
    """The ``runs`` row a run begins with on this machine: the spec's columns, the kernels
    that run it, the machine's fingerprint and the region's carbon intensity."""
    from greenbench.models import FAMILIES

    s = spec.settings
    user = is_user_workload(spec.workload)
    kernels = {} if user else FAMILIES[s["model.family"]].kernels_used(s["model.scan"])
    if not simulated.is_simulated(spec):
        from greenbench.running.worker import optimizer_kernel

        kernels["optimizer"] = optimizer_kernel(s["device"])
    if s.get("model.liger") == "on":
        from greenbench.models.transformer.fused import liger_parts

        kernels |= liger_parts(s["device"])
    overrides = simulated.row_overrides(spec) if simulated.is_simulated(spec) else {}
    if user:  # the columns a built-in model and data fill, from the workload and its package
        overrides = user_run.row_overrides(spec, fingerprint.get("versions", {}))
    return (
        spec_columns(spec, run_id)
        | {
            "kernels": json.dumps(kernels, sort_keys=True),
            "device_type": device_type,
            "carbon_intensity_g_per_kwh": carbon[0],
            "git_sha": fingerprint.get("git_sha"),
            "host": fingerprint.get("host"),
            "hardware": json.dumps(fingerprint.get("hardware", fingerprint), default=str),
            "versions": json.dumps(fingerprint.get("versions", {}), default=str),
        }
        | overrides
    )


def spec_columns(spec: RunSpec, run_id: str) -> dict[str, Any]:
    """The columns of a run's ``runs`` row its spec alone fills (status ``running``, started
    now): what a cluster's submitter knows of a configuration its job never began."""

    s = spec.settings
    layout = spec.layout
    return {
        "run_id": run_id,
        "suite": spec.suite,
        "workload": spec.workload,
        "config_name": spec.name,
        "config_key": spec_key(spec),
        "config": json.dumps(spec.to_dict(), sort_keys=True),
        "model_family": s.get("model.family"),
        "model_size": s.get("model.size"),
        "strategy": s["strategy"],
        "layout": layout.text,
        **layout.degrees(),
        "rank_cpu_quota": s["emulate.rank_cpu_quota"] == "on",
        "device": s["device"],
        "nproc": s["nproc"],
        "nnodes": s["nnodes"],
        "precision": s["precision"],
        "seq_len": s.get("data.seq_len"),
        "lengths": s.get("data.lengths"),
        "region": s["energy.region"],
        "status": "running",
        "label": spec.label,
        "started_at": dt.datetime.now(dt.timezone.utc).replace(tzinfo=None),
        "simulated": False,
    }


class IdlePower:
    """Idle power of this node, sampled once per energy source and reused for the session.

    The sample is watched (`ContentionWatch`): one taken while other processes kept the machine
    busy, or another greenbench ran, is returned with why it is unreliable (net energy is then
    unknown, `metrics.aggregate_repeat`) and not reused: the next configuration samples again.
    An emulated GPU's idle power is its model's, whatever the machine does."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, ...], float | None] = {}

    def get(self, spec: RunSpec) -> tuple[float | None, str]:
        """(idle watts or None, why the sample is unreliable or "")."""
        from greenbench.energy import select_meter

        s = spec.settings
        if s["energy.idle_s"] <= 0:
            return None, ""
        key = (s["device"], s["energy.source"], s.get("emulate.gpu", ""))
        if key in self._cache:
            return self._cache[key], ""
        if s.get("emulate.gpu"):  # the emulated GPUs' idle power, from their model
            from greenbench.running import emulated_gpu

            meter = emulated_gpu.meter(s, range(s["nproc"]), sample_power=False)
        else:
            meter = select_meter(
                s["device"],
                None if s["energy.source"] == "auto" else s["energy.source"],
                gpu_indices=list(range(s["nproc"])) if s["device"] == "cuda" else [],
                local_rank=0,
            )
        try:
            with ContentionWatch() as watch:
                watts = meter.idle_power_w(s["energy.idle_s"])
        finally:
            meter.close()
        if watch.contended and not s.get("emulate.gpu"):
            return watts, f"idle power sampled while {watch.seen}"
        self._cache[key] = watts
        return watts, ""


def run_specs(
    specs: list[RunSpec],
    db_path: Path,
    *,
    on_event: Callable[[str, RunSpec | None, dict[str, Any]], None] | None = None,
    rdzv: dict[str, Any] | None = None,
    resume: bool = False,
    force: bool = False,
    devices: int | None = None,
    run_ids: list[str] | None = None,
    to_shards: bool = False,
) -> RunSummary:
    """Run every spec, storing each as it finishes. ``on_event`` drives progress display.

    With ``resume``, configurations that already have an ``ok`` run with the same identity and
    label in the database are skipped (reported as ``skipped``), so an interrupted suite can be
    finished without repeating what was stored.

    Before anything is stored, forced energy sources are checked, and every configuration is
    checked against this machine (`greenbench.running.preflight`; ``force`` skips the latter):
    its ranks need a device each (the visible GPUs, at most ``devices``; on CPU, ``devices``
    ranks when given) and its estimated memory and time must fit. One configuration that cannot
    is refused (DoesNotFit, exit 2, nothing written), and so is a suite none of whose
    configurations can; otherwise it is stored ``skipped`` with the reason and the others run.

    A cluster job (`greenbench.cluster`) passes the ``run_ids`` its submitter chose, one per
    spec, and ``to_shards``: every run then goes to a result shard of its own
    (`greenbench.store.shard_writer`), the database is never opened, and a configuration that
    cannot fit the node is stored ``skipped`` rather than refused, since nobody is there to
    read a refusal.
    """
    from greenbench.energy.carbon import carbon_intensity_g_per_kwh
    from greenbench.hardware.fingerprint import fingerprint as machine_fingerprint
    from greenbench.running.cpu_quota import sweep_stale
    from greenbench.store import Store, merge_pending, new_run_id
    from greenbench.store.shard_writer import ShardStore

    emit = on_event or (lambda *_: None)
    specs = [resolve_spec(sp) for sp in specs]
    sweep_stale()  # quota groups a killed launcher left behind
    sweep_stale_temp()  # and its working folders
    check_energy_sources(specs)
    check_node_meters(specs)
    specs, limits = plan_limits(specs)  # refused here (exit 2) when a limit cannot be set
    for i, plan in limits.items():  # a limit moved into the allowed range: say so now
        if plan.note:
            emit("note", specs[i], {"message": f"{specs[i].name}: {plan.note}"})
    if rdzv and rdzv.get("node_rank"):
        return follow_specs(specs, rdzv, emit, limits)
    peaks = [
        (None, None, simulated.device_type(spec))
        if simulated.is_simulated(spec)
        else peak_flops_for(spec)
        for spec in specs
    ]
    refused = {} if force else {
        i: why
        for i, (spec, peak) in enumerate(zip(specs, peaks, strict=True))
        if not simulated.is_simulated(spec)
        and (
            why := why_too_few_devices(spec, devices)
            or why_it_cannot_fit(spec, trusted_peak(spec, peak[0]))
        ) is not None
    }  # fmt: skip
    if len(specs) == 1 and refused and not to_shards:
        raise DoesNotFit(f"{specs[0].name} {refused[0]} (--force runs it anyway)")
    if refused and len(refused) == len(specs) and not to_shards:
        raise DoesNotFit(nothing_can_run(list(refused.values())))
    now: dict[str, Any] = {}  # the configuration a wait for the database's lock is for
    store: Store | ShardStore
    if to_shards:
        store = ShardStore(db_path)
    else:
        store = Store(  # validates the file and reads every block of it before any run starts
            db_path,
            write_wait_s=lock_wait_s(),
            verify=True,
            on_wait=lambda waited: emit("wait", now.get("spec"), {"waited_s": waited}),
        )
        # shards an earlier run (or a cluster job) left: merged now, one transaction each
        for line in merge_pending(store, timeout_s=store.lock_timeout_s).lines():
            emit("note", None, {"message": line})
    fingerprint = machine_fingerprint()
    idle = IdlePower()
    summary = RunSummary()
    done = finished_configs(db_path) if resume else set()
    for i, spec in enumerate(specs):
        s = spec.settings
        if (spec_key(spec), spec.label) in done:
            emit("skip", spec, {})
            continue
        carbon = carbon_intensity_g_per_kwh(s["energy.region"])
        peak, peak_source, device_type = peaks[i]
        run_id = run_ids[i] if run_ids else new_run_id()
        if i in refused:
            reason = f"cannot fit this machine: {refused[i]} (--force runs it anyway)"
            row = run_row(spec, run_id, device_type, fingerprint, carbon)
            store.begin_run(row | row_columns(spec, limits.get(i)))
            store.mark_run(run_id, "skipped", reason)
            record(summary, spec, run_id, "skipped", reason)
            emit("end", spec, {"run_id": run_id, "status": "skipped", "error": reason})
            continue
        now["spec"] = spec
        row = run_row(spec, run_id, device_type, fingerprint, carbon)
        if not store.begin_run(row | row_columns(spec, limits.get(i))):
            emit("note", spec, {"message": f"{db_path} is locked by another process: run "
                                f"{run_id} goes ahead and is stored when it finishes"})  # fmt: skip
        emit("start", spec, {"run_id": run_id})
        status, error = "ok", None
        try:
            if simulated.is_simulated(spec):
                outcome = simulated.simulate_run(spec, carbon_g_per_kwh=carbon[0])
            else:
                idle_w, idle_why = idle.get(spec)
                with held_limit(spec, limits.get(i)) as held:  # restored on every exit
                    outcome = measure(
                        spec, rdzv, logs_dir_for(db_path) / run_id, (peak, peak_source),
                        idle_w=idle_w, carbon_g_per_kwh=carbon[0], idle_why=idle_why,
                    )  # fmt: skip
                outcome.warnings += held.problems  # a limit not restored: the doctor retries
                if outcome.contended:
                    emit("note", spec, {"message": f"{run_id}: {outcome.warnings[-1]}"})
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
        shard = store.finish_run(run_id, outcome)
        if shard is not None:
            emit("note", spec, {"message": stored_in_shard(db_path, run_id, shard)})
        record(summary, spec, run_id, status, error)
        emit(
            "end",
            spec,
            {"run_id": run_id, "status": status, "error": error, "repeats": outcome.repeats,
             "contended": outcome.contended, "others_busy_cores": outcome.others_busy_cores,
             "other_greenbench": outcome.other_greenbench},
        )  # fmt: skip
    return summary


def measure(
    spec: RunSpec,
    rdzv: dict[str, Any] | None,
    keep_logs: Path,
    peak: tuple[float | None, str | None],
    *,
    idle_w: float | None,
    carbon_g_per_kwh: float | None,
    idle_why: str = "",
) -> RunOutcome:
    """Run ``spec``'s workers, watching the machine for contention, and aggregate each repeat
    (the last warning names the contention when there was some; ``idle_why``: why the idle
    sample is unreliable, so net energy is unknown)."""
    with ContentionWatch() as watch:
        execution = execute(spec, rdzv, keep_logs=keep_logs)
    ranks = execution.ranks
    s = spec.settings
    repeats, peak_flops = aggregate_checked(
        spec, ranks, peak[0], peak[1],
        n_devices=s["nproc"] * s["nnodes"], idle_power_w=idle_w,
        carbon_g_per_kwh=carbon_g_per_kwh, idle_sample_note=idle_why,
    )  # fmt: skip
    if is_user_workload(spec.workload):
        repeats = user_run.with_flops_note(spec, repeats)
    return RunOutcome(
        status="ok",
        repeats=repeats,
        ranks=ranks,
        peak_flops=peak_flops,
        peak_flops_source=peak[1],
        warnings=[*execution.warnings, *([watch.reason] if watch.contended else [])],
        log_path=execution.log_dir,
        contended=watch.contended,
        others_busy_cores=watch.others_busy_cores,
        other_greenbench=watch.other_greenbench,
    )


def record(summary: RunSummary, spec: RunSpec, run_id: str, status: str, error: str | None) -> None:
    summary.run_ids.append(run_id)
    summary.statuses.append(status)
    summary.names.append(spec.name)
    summary.errors.append(error)


def logs_dir_for(db_path: Path) -> Path:
    """Where the worker logs of failed (or warned) runs are kept: ``<db stem>-logs/<run id>/``
    beside the database, so `greenbench show` can point to them."""
    db_path = Path(db_path)
    return db_path.absolute().parent / f"{db_path.stem}-logs"


def lock_wait_s() -> float:
    """How long a finished run's write waits for a database another process holds before the
    run goes to a shard: ``$GREENBENCH_LOCK_WAIT_S`` seconds, 60 by default."""
    from greenbench.errors import StoreError

    text = os.environ.get("GREENBENCH_LOCK_WAIT_S", "60")
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise StoreError(f"GREENBENCH_LOCK_WAIT_S must be a number of seconds ≥ 0, got {text!r}")
    return value


def stored_in_shard(db_path: Path, run_id: str, shard: Path) -> str:
    """The line that tells a user where a run went when the database would not take it."""
    return (
        f"{db_path} stayed locked by another process: run {run_id} was stored in {shard}; "
        "the next `greenbench run` or `greenbench merge` folds it into the database"
    )


def follow_specs(
    specs: list[RunSpec],
    rdzv: dict[str, Any],
    emit: Callable[[str, RunSpec, dict[str, Any]], None],
    limits: dict[int, LimitPlan] | None = None,
) -> RunSummary:
    """A node other than node 0 of a multi-node run: start this node's ranks for every spec and
    store nothing. Global rank 0 (on node 0) gathers every rank's results, and node 0's launcher
    writes them, so the database has one writer however many nodes take part. Each node holds
    its own GPUs' power limit (``limits``) around its ranks."""
    summary = RunSummary()
    for i, spec in enumerate(specs):
        if simulated.is_simulated(spec):  # node 0 simulates it; no rank runs here
            continue
        emit("start", spec, {"run_id": f"node {rdzv['node_rank']}"})
        status, error = "ok", None
        try:
            with held_limit(spec, (limits or {}).get(i)):
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
    """SIGINT and SIGTERM both raise KeyboardInterrupt, so the current run is marked interrupted
    (remembered, so that a stop landing while a rank is being started is not lost:
    `greenbench.processes.stop_handler`).

    SIGINT is set explicitly: a process started in the background by a non-interactive shell
    (``cmd &`` in a script, many CI runners) inherits SIGINT *ignored*, and Python then leaves it
    ignored, so ``kill -INT`` would do nothing."""

    signal.signal(signal.SIGINT, stop_handler)
    signal.signal(signal.SIGTERM, stop_handler)
