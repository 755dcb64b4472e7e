"""Aggregation of measurements: a repeat's figures from its ranks' windows (throughput, energy,
J/token, MFU, percentiles) and a run's medians from its repeats.

Pure functions of numbers (no torch, no I/O), so the launcher, the dashboard and the tests
compute them the same way. Conventions, each chosen once here:

- **Seconds** of a repeat is the slowest rank's window: ranks of one job finish together.
- **Energy** is the sum of the windows ranks carry (each GPU read by its owner, CPU/DRAM of a
  node by its local rank 0, so nothing is counted twice). If any window failed to read, the
  repeat's energy is None with a note: never a partial sum passed off as the whole.
- **Net energy** = gross − ``idle_power_w`` × seconds, where ``idle_power_w`` is the idle power
  of everything the meters read, i.e. the node-level idle power summed over the nodes. It is
  never negative: an idle baseline sampled on a busy machine (the launcher says so), or one above
  the window's mean power, is unreliable (`greenbench.vocabulary.trust.idle_problem`), and net
  energy is then None with the reason in ``idle_note``.
- **Step times**: a data-parallel step ends when its slowest rank does, so the repeat's step
  times are the element-wise max over ranks when all ranks timed the same number of steps;
  otherwise (pipeline schedules) the pooled union of every rank's step times, noted.
- **Wait fraction** = the ranks' waiting seconds ÷ their window seconds, waiting read from the
  communication records (in a collective, the time beyond the last-arriving rank's). Where the
  ranks' collectives could not be matched call by call, their waiting is unknown and left out,
  and the repeat's note says so (`RankResult.comm_note`).
- **Wait energy** = energy × wait fraction: an attribution estimate (it assumes power is flat
  across compute and waiting), not a measurement.
- **Beside the run's devices** (`RankResult.extra_energy`, local rank 0 only): the node's own
  meter (IPMI, Redfish) is ``energy_node_j``, never added into ``energy_j``, and unknown (None,
  with the meter's note) when it did not answer; RAPL's CPU and DRAM on a GPU run fill
  ``energy_cpu_j``/``energy_dram_j`` (``energy_host_source`` names it), also outside ``energy_j``,
  which stays what the run's own devices drew.
- **GPU power** per device: the window's mean is GPU energy ÷ seconds ÷ devices; the peak is the
  highest power sample of any one GPU (where its meter sampled power).
- **Useful tokens**: a rank's ``useful_tokens`` (tokens × the share of the blocks each step's
  paths ran; all of ``tokens`` where it carries none) summed over ranks; ``visited_share`` is
  useful ÷ tokens, ``useful_flops`` the repeat's FLOPs (already counted for the blocks run),
  useful tokens/s and J per useful token the plain figures over useful tokens. A run whose
  microbatches skip stages trains the full model on fewer token-equivalents than it reads;
  these are its figures against a full-model run's.
- **MFU above 1** is impossible, so it is never stored or shown, nor clamped: the peak (a CPU
  calibration taken under load, say) or the FLOP count is wrong, and the repeat's MFU is None
  with the reason in ``mfu_note``. (The launcher first re-measures a CPU peak that a run beat.)
- **Two FLOP conventions** (`greenbench.vocabulary.flops`): ``flops``/``mfu`` are PaLM's (full
  attention), ``flops_causal``/``mfu_causal`` the causal one, unknown (None) when any rank's is.
- **A run to a target loss** (`RankResult.target`; every rank reports one, or none does): the
  window is the training up to where the run stopped, so a repeat that reached the target has
  the repeat's own tokens, seconds and energy (gross and net, by the rules above) as its figures
  to target, and one that did not has none of them (None: it took more than its budget, and how
  much more is not known); its best validation loss is stored either way (measured: how close it
  came). Evaluation's seconds are the slowest rank's, its joules summed over the ranks that read
  a meter (unknown when one of them could not). The validation curve: each point's step, tokens
  and loss as the ranks report them (the same on every rank), its seconds the slowest rank's and
  its joules summed like the repeat's energy. A run's median of a figure to target
  (`greenbench.aggregate.target.target_medians`) counts a repeat that did not reach the target
  as above every repeat that did, so it is known only while those that reached hold the median.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from greenbench.aggregate.target import repeat_target
from greenbench.energy.base import EnergyWindow
from greenbench.results import RankResult, RepeatResult
from greenbench.stats import median_ci, percentile
from greenbench.vocabulary import NODE_SOURCES
from greenbench.vocabulary.trust import idle_problem

JOULES_PER_KWH = 3.6e6


def mfu(
    flops: float, seconds: float, peak_flops_per_device: float | None, n_devices: int
) -> float | None:
    """Model FLOPs utilisation: achieved FLOP/s over the devices' peak; None without a peak.

    ``peak_flops_per_device`` must be the peak of the device the work ran on (a GPU datasheet
    figure, or the CPU GEMM calibration for CPU ranks), never a GPU figure for CPU work.
    """
    if seconds <= 0:
        raise ValueError(f"mfu needs seconds > 0, got {seconds}")
    if n_devices < 1:
        raise ValueError(f"mfu needs n_devices >= 1, got {n_devices}")
    if peak_flops_per_device is None or peak_flops_per_device <= 0:
        return None
    return flops / (seconds * peak_flops_per_device * n_devices)


def exceeds_peak(
    flops: float, seconds: float, peak_flops_per_device: float | None, n_devices: int
) -> bool:
    """Whether the achieved FLOP/s per device is above the peak (MFU > 1: the peak is wrong)."""
    value = mfu(flops, seconds, peak_flops_per_device, n_devices)
    return value is not None and value > 1.0


def checked_mfu(
    flops: float, seconds: float, peak_flops_per_device: float | None, n_devices: int
) -> tuple[float | None, str]:
    """MFU and a note: above 1, MFU is unknown (None) and the note says why; never clamped."""
    value = mfu(flops, seconds, peak_flops_per_device, n_devices)
    if value is None or value <= 1.0:
        return value, ""
    achieved = flops / (seconds * n_devices)
    return None, (
        f"MFU unknown: the achieved {achieved:.3g} FLOP/s per device is {value:.0%} of the "
        f"peak {peak_flops_per_device:.3g} FLOP/s, so the peak (or the FLOP count) is wrong"
    )


def _energy(
    ranks: Sequence[RankResult],
) -> tuple[str, bool, float | None, dict[str, float | None], list[str]]:
    """Source, measured, gross joules, per-component joules and notes from the ranks' windows."""
    windows: list[tuple[int, EnergyWindow]] = [(r.rank, r.energy) for r in ranks if r.energy]
    none = {"energy_gpu_j": None, "energy_cpu_j": None, "energy_dram_j": None}
    if not windows:
        return "none", False, None, none, ["no rank read an energy meter"]
    notes = [f"rank {rank}: {w.note}" for rank, w in windows if w.note]
    sources = sorted({w.source for _, w in windows})
    measured = all(w.measured for _, w in windows)
    if len(sources) > 1:
        notes.append(f"ranks used different energy sources ({', '.join(sources)})")
        if not measured and any(w.measured for _, w in windows):
            notes.append("part of the energy is an estimate, so the total counts as one")
    failed = [rank for rank, w in windows if w.energy_j is None]
    if failed:
        notes.append(f"energy unknown: meter read failed on rank(s) {failed}")
        return "+".join(sources), measured, None, none, notes
    parts: dict[str, float | None] = {}
    for name in none:
        known = [getattr(w, name) for _, w in windows if getattr(w, name) is not None]
        parts[name] = math.fsum(known) if known else None
    total = math.fsum(w.energy_j for _, w in windows if w.energy_j is not None)
    return "+".join(sources), measured, total, parts, notes


def _step_times(ranks: Sequence[RankResult]) -> tuple[tuple[float, ...], str]:
    lengths = {len(r.step_times_s) for r in ranks}
    if len(lengths) == 1:
        return tuple(max(steps) for steps in zip(*(r.step_times_s for r in ranks), strict=True)), ""
    pooled = tuple(t for r in ranks for t in r.step_times_s)
    return pooled, "ranks timed different step counts: step percentiles pool all ranks' steps"


def _gpu_power(
    ranks: Sequence[RankResult], seconds: float, gpu_j: float | None, n_devices: int
) -> tuple[float | None, float | None]:
    """(mean power per GPU, highest sample of any GPU) over one repeat's window."""
    mean = gpu_j / seconds / n_devices if gpu_j is not None and seconds > 0 else None
    samples = [
        s.power_w
        for r in ranks
        if r.energy is not None
        for s in r.energy.samples
        if s.component.startswith("gpu")
    ]
    return mean, (max(samples) if samples else None)


def _beside(ranks: Sequence[RankResult], parts: dict[str, float | None]) -> dict[str, Any]:
    """The node meter's and the host CPU's readings beside the run's devices (module doc)."""
    extra = [w for r in ranks for w in r.extra_energy]
    out: dict[str, Any] = {"energy_node_j": None, "energy_node_source": None}
    node = [w for w in extra if w.source in NODE_SOURCES]
    notes = [w.note for w in node if w.note]
    if node:
        out["energy_node_source"] = "+".join(sorted({w.source for w in node}))
        known = [w.energy_j for w in node if w.energy_j is not None]
        if len(known) == len(node):
            out["energy_node_j"] = math.fsum(known)
        else:
            notes.insert(0, "unavailable: the node meter did not answer")
    out["energy_node_note"] = "; ".join(notes)
    host = [w for w in extra if w.source not in NODE_SOURCES and w.energy_j is not None]
    out["energy_host_source"] = None
    for name in ("energy_cpu_j", "energy_dram_j"):
        known = [getattr(w, name) for w in host if getattr(w, name) is not None]
        if parts[name] is None and known:
            parts[name] = math.fsum(known)
            out["energy_host_source"] = "+".join(sorted({w.source for w in host}))
    return out


def _most_state(ranks: Sequence[RankResult]) -> int | None:
    states = [r.state_bytes for r in ranks]
    return None if any(s is None for s in states) else max(s for s in states if s is not None)


def aggregate_repeat(
    ranks: list[RankResult],
    *,
    idle_power_w: float | None,
    peak_flops: float | None,
    n_devices: int,
    carbon_g_per_kwh: float | None,
    idle_sample_note: str = "",
) -> RepeatResult:
    """Combine one repeat's rank results into the ``results`` row (conventions: module doc).

    ``idle_power_w`` is the summed idle power of the nodes (None: no net energy);
    ``idle_sample_note`` says why it was sampled on a busy machine ("" when it was not: then
    only an idle power above the window's mean power makes it unreliable);
    ``peak_flops`` is per device (None: no MFU; exceeded: MFU None with ``mfu_note``);
    ``carbon_g_per_kwh`` None: no CO2.
    """
    if not ranks:
        raise ValueError("aggregate_repeat needs at least one rank result")
    repeats = {r.repeat for r in ranks}
    if len(repeats) != 1:
        raise ValueError(f"rank results of different repeats mixed: {sorted(repeats)}")
    step_times, step_note = _step_times(ranks)
    if not step_times:
        raise ValueError("rank results carry no step times")
    tokens = sum(r.tokens for r in ranks)
    seconds = max(r.seconds for r in ranks)
    if seconds <= 0:
        raise ValueError(f"measured window must last > 0 s, got {seconds}")
    source, measured, energy_j, parts, notes = _energy(ranks)
    if step_note:
        notes.append(step_note)
    notes.extend(dict.fromkeys(r.comm_note for r in ranks if r.comm_note))

    energy_net_j = None
    idle_note = idle_problem(idle_power_w, energy_j, seconds, idle_sample_note)
    if energy_j is not None and idle_power_w is not None and not idle_note:
        energy_net_j = energy_j - idle_power_w * seconds
    total_s = math.fsum(r.seconds for r in ranks)
    wait_fraction = math.fsum(r.wait_s for r in ranks) / total_s
    flops = math.fsum(r.flops for r in ranks)
    causal = [r.flops_causal for r in ranks]
    flops_causal = None if None in causal else math.fsum(c for c in causal if c is not None)
    if tokens > 0:
        loss = math.fsum(r.loss * r.tokens for r in ranks) / tokens
    else:
        loss = math.fsum(r.loss for r in ranks) / len(ranks)

    def per_token(joules: float | None) -> float | None:
        return joules / tokens if joules is not None and tokens > 0 else None

    useful = math.fsum(r.tokens if r.useful_tokens is None else r.useful_tokens for r in ranks)
    share = useful / tokens if tokens > 0 else None

    mfu_value, mfu_note = checked_mfu(flops, seconds, peak_flops, n_devices)
    mfu_causal = None  # never above PaLM's: its note (if any) says why it is unknown
    if flops_causal is not None:
        mfu_causal = checked_mfu(flops_causal, seconds, peak_flops, n_devices)[0]
    beside = _beside(ranks, parts)
    gpu_avg_w, gpu_peak_w = _gpu_power(ranks, seconds, parts["energy_gpu_j"], n_devices)

    return RepeatResult(
        repeat=repeats.pop(),
        tokens=tokens,
        seconds=seconds,
        tokens_per_s=tokens / seconds,
        energy_source=source,
        energy_measured=measured,
        energy_j=energy_j,
        energy_net_j=energy_net_j,
        energy_gpu_j=parts["energy_gpu_j"],
        energy_cpu_j=parts["energy_cpu_j"],
        energy_dram_j=parts["energy_dram_j"],
        idle_power_w=idle_power_w,
        joules_per_token=per_token(energy_j),
        net_joules_per_token=per_token(energy_net_j),
        flops=flops,
        mfu=mfu_value,
        peak_mem_bytes=max(r.peak_mem_bytes for r in ranks),
        state_bytes=_most_state(ranks),
        step_time_p50_s=percentile(step_times, 50),
        step_time_p95_s=percentile(step_times, 95),
        wait_fraction=wait_fraction,
        wait_energy_j=energy_j * wait_fraction if energy_j is not None else None,
        co2_g=(
            energy_j / JOULES_PER_KWH * carbon_g_per_kwh
            if energy_j is not None and carbon_g_per_kwh is not None
            else None
        ),
        loss=loss,
        energy_note="; ".join(notes),
        mfu_note=mfu_note,
        step_times_s=step_times,
        gpu_power_avg_w=gpu_avg_w,
        gpu_power_peak_w=gpu_peak_w,
        idle_note=idle_note,
        visited_share=share,
        useful_tokens=useful if share is not None else None,
        useful_flops=flops if share is not None else None,
        useful_tokens_per_s=useful / seconds if share is not None else None,
        joules_per_useful_token=(
            energy_j / useful if energy_j is not None and share is not None and useful > 0 else None
        ),
        flops_causal=flops_causal,
        mfu_causal=mfu_causal,
        **beside,
        **repeat_target(
            ranks, tokens=tokens, seconds=seconds, energy_j=energy_j, energy_net_j=energy_net_j
        ),
    )


def summarise(values: Iterable[float | None], confidence: float = 0.95) -> dict[str, Any]:
    """Median and its distribution-free CI over repeats: ``{n, median, ci_low, ci_high, min,
    max}``. None and NaN values (unknown energy) are left out and counted in ``n_missing``."""
    all_values = list(values)
    xs = [float(v) for v in all_values if v is not None and not math.isnan(v)]
    out: dict[str, Any] = {"n": len(xs), "n_missing": len(all_values) - len(xs)}
    if not xs:
        return out | dict.fromkeys(("median", "ci_low", "ci_high", "min", "max"))
    med, low, high = median_ci(xs, confidence)
    return out | {"median": med, "ci_low": low, "ci_high": high, "min": min(xs), "max": max(xs)}


#: the figures of a run that `list runs` shows and `greenbench run`'s line prints
RUN_FIGURES = ("tokens_per_s", "joules_per_token", "mfu")


def run_medians(repeats: Iterable[Any], figures: Sequence[str] = RUN_FIGURES) -> dict[str, Any]:
    """The median of each figure over a run's repeats (objects or mappings carrying them), as
    the store's ``median`` gives it (the mean of the middle two for an even count); None where
    no repeat has the figure. What is printed for a run is what is stored for it, never one
    repeat picked by one figure."""
    rows = list(repeats)

    def value(row: Any, name: str) -> Any:
        return row.get(name) if isinstance(row, dict) else getattr(row, name, None)

    out: dict[str, Any] = {}
    for name in figures:
        xs = sorted(
            float(v) for r in rows if (v := value(r, name)) is not None and not math.isnan(v)
        )
        mid = len(xs) // 2
        out[name] = None if not xs else xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return out
