"""``emulate.gpu``: CPU ranks standing in for GPUs of one type, to try and test the GPU power path
(limits, their restore, the ``power-limit`` workload, its report) on a machine without a GPU.

Each rank trains on the CPU as usual. Its "GPU" is device ``local_rank`` of an emulated NVML
(`greenbench.hardware.nvml_model`): the launcher sets that device's power limit through it
(`greenbench.launcher.power_limits`) and the rank reads the device's energy through the ordinary
NVML meter. No real GPU is ever touched. Energy is labelled `EMULATED_SOURCE` (shown "emulated
(GPU power model)"), never measured, and the run's device type says emulated, so no such result is
pooled or compared with a measurement.

**Time comes from the model, applied to one base step** (`EmulatedDevice`). A GPU's step time
does not depend on what the host's other cores are doing, and the CPU's does: timed on the CPU, a
sweep run while another job came and went drew a lower limit three times *faster* than the
default, which no GPU does. So an emulated step's time is not what the CPU took, it is

    (base step + any deliberate ``debug.slowdown_s``) × the emulated clock's slowdown

where the slowdown is the device's maximum SM clock over its current one (as its NVML reports them:
`greenbench.hardware.gpu_model`'s ``(P_busy / L)^(1/3)`` under a limit ``L``), and the **base
step** is the fastest real step of the configuration's rank at full clock (where the steps' FLOPs
are known, its rate: a step of other lengths takes its FLOPs' share of it): measured by a run at the
device's default limit (or, when none has been, by the first run of the configuration) over its
settled warm-up steps and its first window, and kept by the emulated device
(`NvmlModel.base_step`, keyed by the configuration without its limit, and the rank) for every
later run of the configuration at any limit, until a run at the default limit measures it again.
The fastest step is the one least disturbed by other work (load only ever slows a step); how busy
other processes kept the machine while it was measured is kept with it and said in every repeat's
energy note, so a base taken on a busy machine is known to be slow, though the limits' ratios,
which are the model's, stand. The device's energy is the model's busy power under the limit over
those times (the rank drives it: `NvmlModel.drive`, `NvmlModel.run`). Each step still trains for
real (loss, memory, communication); the rank sleeps out what is left of a step's model time, so
the wall clock keeps pace with the model where the CPU is fast enough (the node's meter, read
beside, sees about the same window). A sweep of an emulated GPU therefore follows its model
exactly, however busy the CPU was: each limit's time is the model's multiple of one number.
Communication and waiting keep their measured shares of each step.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from greenbench.config import section_settings
from greenbench.energy.nvml import NvmlMeter
from greenbench.energy.settings import GpuSettings
from greenbench.errors import SpecError
from greenbench.hardware.machine import cpu_busy_seconds, logical_cores
from greenbench.hardware.nvml_model import EmulationError, NvmlModel, emulated_nvml
from greenbench.settings import identity_of
from greenbench.settings.runspec import RunSpec
from greenbench.vocabulary import EMULATED_SOURCE, config_key

#: the settings a base step does not depend on: the limit it is applied to (the GPU section's)
LIMIT_KEYS = tuple(s.key for s in section_settings(GpuSettings))


def emulated(spec: RunSpec) -> str:
    """The emulated GPU type of a run ("" when its devices are what they are)."""
    emulate = spec.config.emulate
    return str(emulate.gpu or "") if emulate is not None else ""


def library(gpu: str) -> NvmlModel | None:
    """The emulated NVML of GPU type ``gpu`` (a run's `emulated`), or None for the real driver
    (``gpu`` "")."""
    if not gpu:
        return None
    try:
        return emulated_nvml(gpu)
    except EmulationError as e:
        raise SpecError(str(e)) from None


def meter(
    gpu: str,
    indices: Sequence[int],
    *,
    sample_power: bool,
    nvml: NvmlModel | None = None,
) -> NvmlMeter:
    """The energy meter of emulated devices ``indices`` of GPU type ``gpu``: NVML's (``nvml``'s,
    else a new emulated driver's), labelled emulated."""
    return NvmlMeter(
        list(indices),
        library=nvml if nvml is not None else library(gpu),
        sample_power=sample_power,
        source=EMULATED_SOURCE,
        measured=False,
    )


def _slowdown(nv: NvmlModel, index: int) -> float:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    now = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
    return max(1.0, nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM) / max(now, 1))


def device_type(gpu: str) -> str | None:
    """The ``runs.device_type`` of a run emulating GPU type ``gpu`` (None when not emulated)."""
    nv = library(gpu)
    return None if nv is None else f"emulated:{nv.emulated}"


def base_key(spec: RunSpec, rank: int) -> str:
    """Which base step a rank's steps are the model's multiple of: its configuration without its
    power limit, and the rank."""
    rest = {k: v for k, v in spec.settings.items() if k not in LIMIT_KEYS}
    return f"{config_key(identity_of(rest, spec.workload))}/rank{rank}"


# ----------------------------------------------------------------------------- the base's load


def _run_cpu_seconds() -> float:
    """CPU seconds of this run's ranks on this node so far: under torchrun its agent's whole
    tree (every local rank), else this process."""
    import psutil

    me = psutil.Process()
    root = me.parent() if "TORCHELASTIC_RUN_ID" in os.environ and me.parent() else me
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:  # ended meanwhile
            continue
        total += t.user + t.system
    return total


class LoadWatch:
    """How many cores processes outside this run kept busy since it was made: the machine's busy
    CPU time less this run's ranks' (None where the system does not say)."""

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[float, float | None, float | None]:
        try:
            ours: float | None = _run_cpu_seconds()
        except Exception:  # psutil missing, or the process table unreadable
            ours = None
        return time.monotonic(), cpu_busy_seconds(), ours

    def others_busy_cores(self) -> float | None:
        (t0, busy0, ours0), (t1, busy1, ours1) = self._start, self._read()
        if None in (busy0, busy1, ours0, ours1) or t1 - t0 < 0.1:  # CPU counters tick per 10 ms
            return None
        return max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (t1 - t0)  # type: ignore[operator]


# ----------------------------------------------------------------------------- one rank's device


def describe_base(base: Mapping[str, Any]) -> str:
    """Where a base step came from, in words, for notes."""
    where = "at the default limit" if base.get("at_default") else f"at {base.get('limit_w'):g} W"
    others, cores = base.get("others_busy_cores"), base.get("cores")
    if others is None:
        load = "load unknown"
    elif base.get("contended"):
        load = (
            f"while other processes kept {others:.2f} of {cores} cores busy: the base is slow, "
            "so is every emulated time of this configuration, though the limits' ratios stand"
        )
    else:
        load = f"on a quiet machine (others kept {others:.2f} of {cores} cores busy)"
    return f"measured {base.get('measured_at')} {where}, {load}"


class EmulatedDevice:
    """One rank's emulated GPU over its measured windows (module docstring): its meter, the
    model's time of each step, and the base step that time is a multiple of."""

    def __init__(self, spec: RunSpec, index: int, rank: int) -> None:
        self.gpu = emulated(spec)
        nv = library(self.gpu)
        if nv is None:
            raise ValueError("EmulatedDevice needs settings with emulate.gpu")
        self.nv, self.index = nv, index
        self.key = base_key(spec, rank)
        h = nv.nvmlDeviceGetHandleByIndex(index)
        self.limit_w = nv.nvmlDeviceGetPowerManagementLimit(h) / 1000
        self.at_default = self.limit_w >= nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000
        self.slowdown = _slowdown(nv, index)
        stored = nv.base_step(self.key)
        #: the base step in use: None while this device measures it (`measures`)
        self.base: dict[str, Any] | None = None if self.at_default else stored
        self._fastest = math.inf
        self._fastest_per_flop = math.inf
        self._watch = LoadWatch()
        nv.drive(index)

    @property
    def measures(self) -> bool:
        """Whether this run measures the base step (none stored yet, or at the default limit)."""
        return self.base is None

    def meter(self, *, sample_power: bool) -> NvmlMeter:
        return meter(self.gpu, [self.index], sample_power=sample_power, nvml=self.nv)

    def observe(self, real_s: float, flops: float = 0.0) -> None:
        """A real step of this rank at full clock (a settled warm-up step, or one of the first
        window) and its FLOPs: a candidate for the base step while this run measures it."""
        if self.measures and real_s > 0:
            self._fastest = min(self._fastest, real_s)
            if flops > 0:
                self._fastest_per_flop = min(self._fastest_per_flop, real_s / flops)

    def _base(self) -> tuple[float, float | None] | None:
        """(the base step's seconds, its seconds per FLOP or None): the stored base, else the
        fastest observed so far; None before any step was seen."""
        if self.base is not None:
            per_flop = self.base.get("s_per_flop")
            return float(self.base["step_s"]), None if per_flop is None else float(per_flop)
        if math.isinf(self._fastest):
            return None
        per_flop = None if math.isinf(self._fastest_per_flop) else self._fastest_per_flop
        return self._fastest, per_flop

    def step_s(self, extra_s: float = 0.0, flops: float = 0.0) -> float | None:
        """The model's time of one step of ``flops`` FLOPs (None before any step was seen): the
        base step's rate applied to its FLOPs where both are known (steps of other lengths take
        their share), else the base step itself."""
        base = self._base()
        if base is None:
            return None
        step, per_flop = base
        at_full_clock = flops * per_flop if per_flop is not None and flops > 0 else step
        return (at_full_clock + extra_s) * self.slowdown

    def pace(self, started: float, extra_s: float = 0.0, flops: float = 0.0) -> None:
        """Sleep until the step begun at ``started`` (``time.perf_counter``) has lasted its model
        time, so the wall clock keeps pace with the model where the CPU is fast enough."""
        target = self.step_s(extra_s, flops)
        if target is not None:
            left = target - (time.perf_counter() - started)
            if left > 0:
                time.sleep(left)

    def settle(
        self, real_s: Sequence[float], extra_s: Sequence[float], flops: Sequence[float]
    ) -> list[float]:
        """The model's times of a window's steps (their real seconds, the deliberate
        ``debug.slowdown_s`` each carried, their FLOPs), fixing and storing the base step first
        if this run measures it; the device is driven through them (its energy)."""
        if self.measures:
            for t, f in zip(real_s, flops, strict=True):
                self.observe(t, f)
            if math.isinf(self._fastest):
                raise RuntimeError("an emulated GPU's base step needs at least one real step")
            others = self._watch.others_busy_cores()
            cores = logical_cores()
            from greenbench.rank.contention import BUSY_SHARE

            per_flop = None if math.isinf(self._fastest_per_flop) else self._fastest_per_flop
            self.base = {
                "step_s": self._fastest,
                "s_per_flop": per_flop,
                "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "limit_w": self.limit_w,
                "at_default": self.at_default,
                "others_busy_cores": None if others is None else round(others, 3),
                "cores": cores,
                "contended": None if others is None else others > BUSY_SHARE * cores,
            }
            self.nv.store_base_step(self.key, self.base)
        times = [self.step_s(e, f) or 0.0 for e, f in zip(extra_s, flops, strict=True)]
        self.nv.run(self.index, math.fsum(times))
        return times

    def note(self) -> str:
        """What a window's time and energy are, for its energy note."""
        if self.base is None:
            return ""
        rate = self.base.get("s_per_flop")
        per_flop = "" if rate is None else f", {1 / rate:.4g} FLOP/s, each step by its FLOPs"
        return (
            f"emulated GPU time: {self.slowdown:.4f} × the base step {self.base['step_s']:.4g} s"
            f"{per_flop} (the fastest real step at full clock, {describe_base(self.base)}), not "
            "the CPU's"
        )

    def close(self) -> None:
        self.nv.release(self.index)


def split(real_s: float, comm_s: float, wait_s: float, seconds: float) -> tuple[float, ...]:
    """A window's (compute, communication, waiting) seconds on an emulated GPU: the shares the
    real steps (``real_s`` in all) spent communicating and waiting, of the model's ``seconds``."""
    if real_s <= 0:
        return seconds, 0.0, 0.0
    comm = min(comm_s / real_s, 1.0) * seconds
    wait = min(wait_s / real_s, 1.0) * seconds
    return max(seconds - comm - wait, 0.0), comm, wait
