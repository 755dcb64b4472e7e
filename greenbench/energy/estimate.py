"""CPU (and DRAM) energy *estimate* for machines without counters: TDP × a load model.

This is a model, not a measurement: every window says ``measured=False`` and names its TDP and
where that came from. It follows CodeCarbon 3.3's ``cpu_load`` mode in ``tracking_mode="machine"``
(``codecarbon/external/hardware.py`` ``CPU._get_power_from_cpu_load``)::

    power_w = TDP × (0.1 + 0.9 × load³)      load = machine busy fraction from /proc/stat

with CodeCarbon's busy definition (``SystemCPULoadMeter``: all time minus idle and iowait, guest
time not counted twice). The TDP comes from CodeCarbon's CPU table or its fallback
(:mod:`greenbench.energy.host_power`). DRAM is CodeCarbon's constant RAM power model, labelled
as such; set ``include_dram=False`` to leave it out.

Why machine-wide load and not this process tree's CPU time: torchrun starts the ranks of a node
as siblings, not as children of local rank 0, so rank 0's process tree would miss the other
ranks. The node's CPU is read once, by local rank 0 (see :mod:`greenbench.energy.select`), and
the machine-wide busy fraction covers every rank on the node (and anything else running, which
is why benchmarks should run on a quiet machine; idle power, measured the same way, is reported
beside it). It is also what CodeCarbon does by default.

One difference from CodeCarbon: it samples the load every 15 s and averages the power; we take the
load over the whole window once, so ``begin()``/``end()`` cost one /proc/stat read each (no
threads, no sleeps). For a steady training loop the two agree; for a bursty window the cubic
makes ours lower than a per-interval average would be.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from typing import ClassVar

import psutil

from greenbench.energy.base import EnergyWindow, Meter, Probe
from greenbench.energy.host_power import CpuTdp, host_cpu_tdp, ram_power_w

IDLE_FRACTION = 0.1  # CodeCarbon: "Cubic relationship with minimum 10% of TDP"
B_TO_GB = 1024**3  # CodeCarbon's B_TO_GB (GiB)


def cpu_power_w(tdp_w: float, load: float) -> float:
    """CodeCarbon's machine-mode CPU power for a busy fraction ``load`` in [0, 1]."""
    load = min(max(load, 0.0), 1.0)
    return tdp_w * (IDLE_FRACTION + (1.0 - IDLE_FRACTION) * load**3)


def machine_cpu_times() -> tuple[float, float]:
    """(busy seconds, total seconds) summed over all logical CPUs since boot."""
    t = psutil.cpu_times()
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    busy = total - t.idle - getattr(t, "iowait", 0.0)
    return busy, total


def _is_arm() -> bool:
    return platform.machine().lower() in ("arm64", "aarch64") or platform.machine().startswith(
        "arm"
    )


class EstimateMeter(Meter):
    """TDP × machine load, as CodeCarbon models CPUs without counters. Always available."""

    source: ClassVar[str] = "estimate"
    measured: ClassVar[bool] = False
    #: /proc/stat counts in 10 ms ticks; below ~1 s the busy fraction is coarse
    min_window_s: ClassVar[float] = 1.0

    def __init__(
        self,
        *,
        tdp: CpuTdp | None = None,
        include_dram: bool = True,
        memory_bytes: int | None = None,
        cpu_times: Callable[[], tuple[float, float]] = machine_cpu_times,
    ) -> None:
        self.tdp = tdp if tdp is not None else host_cpu_tdp()
        self._cpu_times = cpu_times
        self.ram_power_w: float | None = None
        self.memory_gb: float | None = None
        if include_dram:
            total = memory_bytes if memory_bytes is not None else psutil.virtual_memory().total
            self.memory_gb = total / B_TO_GB
            self.ram_power_w = ram_power_w(self.memory_gb, arm=_is_arm())
        self._start: tuple[float, float, float] | None = None  # (wall, busy, total)

    @classmethod
    def probe(cls) -> Probe:
        tdp = host_cpu_tdp()
        return Probe(
            cls.source,
            True,
            f"always available (an estimate, not a measurement): CPU TDP {tdp.tdp_w:g} W from "
            f"{tdp.source}",
            {"tdp_w": tdp.tdp_w, "cpu_model": tdp.model, "tdp_source": tdp.source},
        )

    def begin(self) -> None:
        busy, total = self._cpu_times()
        self._start = (time.perf_counter(), busy, total)

    def end(self) -> EnergyWindow:
        if self._start is None:
            raise RuntimeError("EstimateMeter.end() called without begin()")
        wall0, busy0, total0 = self._start
        self._start = None
        busy1, total1 = self._cpu_times()
        seconds = time.perf_counter() - wall0
        d_total = total1 - total0
        load = (busy1 - busy0) / d_total if d_total > 0 else 0.0
        load = min(max(load, 0.0), 1.0)
        power_w = cpu_power_w(self.tdp.tdp_w, load)
        cpu_j = power_w * seconds
        dram_j = self.ram_power_w * seconds if self.ram_power_w is not None else None
        parts = [
            f"estimate, not measured: CPU {power_w:.3g} W = TDP {self.tdp.tdp_w:g} W × "
            f"(0.1 + 0.9 × load³), machine load {load:.1%} (CodeCarbon cpu_load model); "
            f"TDP from {self.tdp.source}"
        ]
        if self.ram_power_w is not None:
            parts.append(
                f"DRAM {self.ram_power_w:g} W constant for {self.memory_gb:.0f} GiB "
                "(CodeCarbon RAM model)"
            )
        if d_total <= 0:
            parts.append("window shorter than /proc/stat resolution: load taken as 0")
        return EnergyWindow(
            source=self.source,
            measured=False,
            seconds=seconds,
            energy_j=cpu_j + (dram_j or 0.0),
            energy_cpu_j=cpu_j,
            energy_dram_j=dram_j,
            note="; ".join(parts),
        )
