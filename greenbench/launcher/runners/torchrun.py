"""The torchrun runner: a configuration's ranks as child processes, measured.

The normal path. Each configuration's ranks run as ``python -m greenbench.rank.worker`` (one
rank) or through torchrun (several; `greenbench.launcher.execute`), under the power limit the
launcher planned, while the machine is watched for contention; their windows are aggregated
into one row per repeat, MFU against the device's peak (a GPU's datasheet figure, or a CPU
calibration, measured again when a run beats it). The node's idle power is sampled, or reused
while fresh and taken quiet (`greenbench.launcher.idle`). What the harness itself cost (start-up
to the first step, the ranks' share of it, calibration, idle baseline, teardown) goes with the
outcome (`HarnessCost`). A rank that fails makes a ``failed`` outcome naming the rank, its last
lines and where its logs were kept.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from greenbench.errors import WorkerFailed
from greenbench.launcher.execute import execute, failed_rank_of, threads_per_rank
from greenbench.launcher.idle import IdlePower
from greenbench.launcher.phases import NO_PHASES, Phases
from greenbench.launcher.power_limits import held_limit
from greenbench.launcher.preflight import (
    why_it_cannot_fit,
    why_too_few_devices,
    why_unsupported,
)
from greenbench.launcher.runners.base import Peak, RunContext, Shape
from greenbench.launcher.runners.record import build_record, model_kernels
from greenbench.rank import user_run
from greenbench.rank.contention import ContentionWatch
from greenbench.results import (
    HarnessCost,
    RankResult,
    RepeatResult,
    RunOutcome,
    RunRecord,
    seconds_between,
)
from greenbench.settings.runspec import RunSpec
from greenbench.vocabulary import is_user_workload


class TorchrunRunner:
    """Runs a configuration's ranks with torchrun (module docstring); takes any configuration
    no other runner takes."""

    name = "torchrun"

    def __init__(self) -> None:
        self.idle = IdlePower()

    @classmethod
    def takes(cls, spec: RunSpec) -> bool:
        return True

    def shape(self, spec: RunSpec) -> Shape:
        run = spec.config.run
        return Shape(run.nnodes, run.nproc, launches_ranks=True)

    def peak(self, spec: RunSpec, *, measure: bool = True) -> Peak:
        if not measure and spec.config.run.device != "cuda":
            return cached_cpu_peak(spec)
        from greenbench.hardware import cpu_peak

        spent = cpu_peak.seconds_spent()
        return Peak(*peak_flops_for(spec), calibration_s=cpu_peak.seconds_spent() - spent)

    def why_not_here(self, spec: RunSpec, peak: Peak, devices: int | None) -> str | None:
        return (
            why_unsupported(spec)
            or why_too_few_devices(spec, devices)
            or why_it_cannot_fit(spec, trusted_peak(spec, peak.flops))
        )

    def record(self, spec: RunSpec, ctx: RunContext) -> RunRecord:
        from greenbench.rank.training import optimizer_kernel

        kernels = model_kernels(spec, optimizer_kernel(spec.config.run.device))
        own: dict[str, Any] = {}
        if is_user_workload(spec.workload):  # the columns a built-in model and data fill
            own = user_run.record_fields(spec, ctx.fingerprint.get("versions", {}))
        return build_record(spec, ctx, device_type=ctx.peak.device_type, kernels=kernels, **own)

    def run(self, spec: RunSpec, ctx: RunContext) -> RunOutcome:
        idle = self.idle.get(spec, ctx.phases)
        try:
            with held_limit(spec, ctx.limit) as held:  # restored on every exit
                outcome = measure(
                    spec, ctx.rdzv, ctx.logs_dir, (ctx.peak.flops, ctx.peak.source),
                    idle_w=idle.watts, carbon_g_per_kwh=ctx.carbon[0], idle_why=idle.why,
                    began_at=ctx.began_at, phases=ctx.phases,
                )  # fmt: skip
        except WorkerFailed as exc:
            error = str(exc)
            return RunOutcome(
                status="failed",
                error=error,
                failed_rank=exc.rank if exc.rank is not None else failed_rank_of(error),
                error_tail=exc.tail,
                log_path=exc.log_dir,
            )
        outcome.warnings += held.problems  # a limit not restored: the doctor retries
        if idle.watts is not None and not idle.why and any(r.idle_note for r in outcome.repeats):
            self.idle.forget(spec)  # above the run's mean power: no longer this machine's idle
        before, after = ctx.peak.calibration_s, outcome.harness.calibration_s or 0.0
        outcome.harness = replace(
            outcome.harness,
            calibration_s=None if before is None else before + after,  # re-measured too
            baseline_s=idle.seconds,
            baseline_age_s=idle.age_s,
        )
        return outcome

    def follow(self, spec: RunSpec, ctx: RunContext) -> None:
        with held_limit(spec, ctx.limit):
            execute(spec, ctx.rdzv)


def peak_flops_for(spec: RunSpec) -> tuple[float | None, str | None, str]:
    """(peak FLOP/s per device, where it came from, device type name) for MFU."""
    from greenbench.hardware import cpu_peak, gpus, machine

    run = spec.config.run
    if run.device == "cuda":
        import torch

        name = torch.cuda.get_device_name(0)
        found = gpus.gpu_peak_flops(name, run.precision)
        if found is None:
            return None, None, name
        return found[0], found[1], name
    peak = cpu_peak.cpu_gemm_peak_flops(*_cpu_peak_args(spec))
    return peak, cpu_peak.CPU_GEMM_SOURCE, f"cpu:{machine.cpu_model()}"


def cached_cpu_peak(spec: RunSpec) -> Peak:
    """The CPU peak ``spec`` would be given, as this machine's calibration cache holds it (no
    torch, nothing measured: `greenbench.hardware.peak_cache`); the flops None when the cache
    has no figure for its threads and precision (the run would measure one)."""
    from greenbench.hardware import machine, peak_cache

    entry = cached_calibration(spec)
    device_type = f"cpu:{machine.cpu_model()}"
    if entry is None:
        return Peak(None, None, device_type)
    return Peak(entry["flops"], peak_cache.CPU_GEMM_SOURCE, device_type)


def trusted_peak(spec: RunSpec, peak: float | None) -> float | None:
    """``peak`` when a time estimate may rest on it: a datasheet figure, or a CPU calibration
    taken on a quiet machine. One taken under load comes out low and would overstate the
    time a run needs, so the up-front time check is skipped rather than trusted to it. What
    stands behind a CPU figure is read from this machine's calibration cache (no torch), which
    holds the figure the run was given (`greenbench.hardware.cpu_peak`): a figure the cache
    does not hold (it could not be written) is not trusted."""
    if peak is None or spec.config.run.device == "cuda":
        return peak
    entry = cached_calibration(spec)
    return peak if entry is not None and entry["trusted"] and entry["flops"] == peak else None


def cached_calibration(spec: RunSpec) -> dict[str, Any] | None:
    """This machine's cached CPU calibration for ``spec``'s threads per rank and precision
    (`greenbench.hardware.peak_cache.cached_entry`), or None."""
    from greenbench.hardware import peak_cache

    run = spec.config.run
    return peak_cache.cached_entry(
        threads_per_rank(run.nproc), peak_cache.dtype_name(run.precision)
    )


def _cpu_peak_args(spec: RunSpec) -> tuple[int, Any]:
    """(intra-op threads per rank, torch dtype) the CPU peak of ``spec`` is calibrated for."""
    import torch

    run = spec.config.run
    dtype = torch.bfloat16 if run.precision == "bf16" else torch.float32
    return threads_per_rank(run.nproc), dtype


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
    phases: Phases = NO_PHASES,
) -> tuple[list[RepeatResult], float | None]:
    """Each repeat's row, and the peak its MFU is relative to.

    A run whose achieved FLOP/s per device beats a CPU calibration proves the calibration too
    low (e.g. taken while other processes held cores): it is measured again, once, now that the
    run's ranks have exited, and MFU recomputed against the new peak, each repeat noting it.
    Where the run still beats the peak (or beats a GPU datasheet figure), MFU is stored unknown
    with its reason (``aggregate.checked_mfu``): never above 1, never clamped.
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
            for k in range(spec.config.run.repeats)
        ]

    repeats = aggregate(peak)
    beaten = [r for r in repeats if exceeds_peak(r.flops, r.seconds, peak, n_devices)]
    if not beaten or peak_source != cpu_peak.CPU_GEMM_SOURCE:
        return repeats, peak
    phases.tell("re-measuring the CPU peak (the run beat it)")
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


def metered_net(
    repeat: RepeatResult, metered_s: float, idle_w: float | None, idle_why: str
) -> dict[str, Any]:
    """A fault-tolerant repeat's net energy and idle note over the seconds its meters ran
    (``metered_s``): its gross energy leaves out the unmetered gaps between a failure and the
    restart, so idle is subtracted, and compared with the mean power, over the metered seconds
    only (over the whole window it would make the mean power look lower than it was)."""
    from greenbench.vocabulary.trust import idle_problem

    if metered_s <= 0 or repeat.energy_j is None or idle_w is None:
        return {}
    note = idle_problem(idle_w, repeat.energy_j, metered_s, idle_why)
    net = None if note else repeat.energy_j - idle_w * metered_s
    return {
        "idle_note": note,
        "energy_net_j": net,
        "net_joules_per_token": net / repeat.tokens if net is not None and repeat.tokens else None,
    }


def measure(
    spec: RunSpec,
    rdzv: dict[str, Any] | None,
    keep_logs: Path | None,
    peak: tuple[float | None, str | None],
    *,
    idle_w: float | None,
    carbon_g_per_kwh: float | None,
    idle_why: str = "",
    began_at: float | None = None,
    phases: Phases = NO_PHASES,
) -> RunOutcome:
    """Run ``spec``'s workers, watching the machine for contention, and aggregate each repeat
    (the last warning names the contention when there was some; ``idle_why``: why the idle
    sample is unreliable, so net energy is unknown; ``phases``: told what the run is doing).
    The outcome's harness cost has the start-up from ``began_at`` to rank 0's first step, the
    ranks' share of it, the teardown, and (as ``calibration_s``) a re-measured CPU peak's
    seconds."""
    from greenbench.hardware import cpu_peak

    with ContentionWatch() as watch:
        execution = execute(spec, rdzv, keep_logs=keep_logs, phases=phases)
    ranks = execution.ranks
    run = spec.config.run
    spent = cpu_peak.seconds_spent()
    repeats, peak_flops = aggregate_checked(
        spec, ranks, peak[0], peak[1],
        n_devices=run.nproc * run.nnodes, idle_power_w=idle_w,
        carbon_g_per_kwh=carbon_g_per_kwh, idle_sample_note=idle_why, phases=phases,
    )  # fmt: skip
    if is_user_workload(spec.workload):
        repeats = user_run.with_flops_note(spec, repeats)
    events = list(execution.events)  # a SkipPipe node killed
    if execution.ledgers:  # a fault-tolerant run: its failures, restarts and checkpoints
        from dataclasses import replace

        from greenbench.rank.ledger import summarize

        told = summarize(execution.ledgers)
        repeats = [replace(r, **told.fields, **metered_net(r, told.metered_s, idle_w, idle_why))
                   for r in repeats]  # fmt: skip
        events += told.events
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
        events=events,
        harness=harness_of(
            execution.started_at,
            execution.stamps,
            began_at,
            recalibration_s=cpu_peak.seconds_spent() - spent,
        ),
    )


def harness_of(
    ranks_started: float | None,
    stamps: dict[str, float],
    began_at: float | None,
    *,
    recalibration_s: float,
    now: float | None = None,
) -> HarnessCost:
    """The harness's cost of one run from when its turn began, when its ranks were started and
    rank 0's stamps (`greenbench.rank.stamps`): start-up to the first step, the ranks' share,
    teardown from the last window to ``now``; ``recalibration_s`` goes in ``calibration_s``
    (the runner adds the peak's own)."""
    ready = stamps.get("ready")
    return HarnessCost(
        startup_s=seconds_between(began_at, ready),
        ranks_s=seconds_between(ranks_started, ready),
        calibration_s=recalibration_s,
        teardown_s=seconds_between(stamps.get("trained"), time.time() if now is None else now),
    )
