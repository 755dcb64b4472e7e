"""GPU, CPU and DRAM energy through Zeus (``zeus.monitor.ZeusMonitor``, ml-energy/zeus).

Zeus reads the same counters as our ``nvml`` and ``rapl`` meters, but also reaches RAPL where we
cannot: through the ``zeusd`` daemon without root, or a container mount (``/zeus_sys``). Each
window is a ``begin_window``/``end_window`` pair with a unique name. We pass
``sync_execution=False``: the worker synchronises the device itself (and torch may have no CUDA).

Zeus's ``Measurement`` maps to our window as: ``gpu_energy`` {index: J} summed →
``energy_gpu_j``; ``cpu_energy`` {package: J} → ``energy_cpu_j``; ``dram_energy`` →
``energy_dram_j``.
Zeus reads RAPL package and DRAM zones separately, so their sum does not count DRAM twice.
"""

from __future__ import annotations

import contextlib
import io
import time
import uuid
from typing import Any, ClassVar

from greenbench.energy.base import EnergyWindow, Meter, Probe
from greenbench.errors import MeterUnavailable


def _sum(d: dict[int, float] | None) -> float | None:
    return float(sum(d.values())) if d else None


class ZeusMeter(Meter):
    """Energy of the given GPUs (CUDA indices) and CPU packages, measured by Zeus."""

    source: ClassVar[str] = "zeus"
    measured: ClassVar[bool] = True
    #: GPU counters step every ~100 ms (see nvml.py); RAPL alone would resolve far less
    min_window_s: ClassVar[float] = 1.0

    def __init__(
        self, gpu_indices: list[int] | None = None, cpu_indices: list[int] | None = None
    ) -> None:
        """Empty or None lists measure nothing of that kind (Zeus's own None means "all")."""
        self.gpu_indices = list(gpu_indices or [])
        self.cpu_indices = list(cpu_indices or [])
        if not self.gpu_indices and not self.cpu_indices:
            raise MeterUnavailable("zeus: nothing to measure (no GPU and no CPU index given)")
        try:
            from zeus.monitor import ZeusMonitor

            with contextlib.redirect_stdout(io.StringIO()):  # amdsmi prints on import
                self._monitor: Any = ZeusMonitor(
                    gpu_indices=self.gpu_indices, cpu_indices=self.cpu_indices
                )
        except ImportError as e:
            raise MeterUnavailable("zeus: not installed (pip install zeus)") from e
        except Exception as e:
            raise MeterUnavailable(f"zeus: ZeusMonitor failed: {type(e).__name__}: {e}") from e
        self._key: str | None = None
        self._begin_error: str | None = None
        self._t0 = 0.0

    @classmethod
    def probe(cls) -> Probe:
        """Which GPUs and RAPL packages Zeus finds; ``details`` has "gpus" and "cpus" counts."""
        try:
            from zeus.device.cpu import get_cpus
            from zeus.device.gpu import get_gpus
        except ImportError:
            return Probe(cls.source, False, "zeus not installed (pip install zeus)")
        found: dict[str, int] = {}
        why: dict[str, str] = {}
        for kind, get in (("gpus", get_gpus), ("cpus", get_cpus)):
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    found[kind] = len(get())
            except Exception as e:  # ZeusGPUInitError, ZeusCPUInitError, no permission, …
                found[kind] = 0
                why[kind] = f"{type(e).__name__}: {e}"
        details: dict[str, Any] = {**found, **{f"{k}_reason": v for k, v in why.items()}}
        if found["gpus"] or found["cpus"]:
            return Probe(
                cls.source,
                True,
                f"zeus finds {found['gpus']} GPU(s) and {found['cpus']} RAPL CPU package(s)",
                details,
            )
        return Probe(
            cls.source,
            False,
            f"zeus finds no GPU ({why.get('gpus', '0 devices')}) and no CPU RAPL "
            f"({why.get('cpus', '0 packages')})",
            details,
        )

    def begin(self) -> None:
        if self._key is not None:  # a window left open by a crash: drop it
            with contextlib.suppress(Exception):
                self._monitor.end_window(self._key, sync_execution=False, cancel=True)
        self._key = f"greenbench-{uuid.uuid4().hex}"
        self._begin_error = None
        self._t0 = time.perf_counter()
        try:
            self._monitor.begin_window(self._key, sync_execution=False)
        except Exception as e:
            self._begin_error = f"{type(e).__name__}: {e}"

    def _failed(self, seconds: float, why: str) -> EnergyWindow:
        return EnergyWindow(self.source, True, seconds, None, note=f"read error: {why}")

    def end(self) -> EnergyWindow:
        if self._key is None:
            raise RuntimeError("ZeusMeter.end() called without begin()")
        key, self._key = self._key, None
        seconds = time.perf_counter() - self._t0
        if self._begin_error is not None:
            return self._failed(seconds, self._begin_error)
        try:
            m = self._monitor.end_window(key, sync_execution=False)
        except Exception as e:
            return self._failed(seconds, f"{type(e).__name__}: {e}")
        gpu_j = _sum(m.gpu_energy) if self.gpu_indices else None
        cpu_j = _sum(m.cpu_energy) if self.cpu_indices else None
        dram_j = _sum(m.dram_energy) if self.cpu_indices else None
        notes = []
        if self.gpu_indices and gpu_j is None:
            notes.append("zeus returned no GPU energy")
        if self.cpu_indices and cpu_j is None:
            notes.append("zeus returned no CPU energy")
        if notes:  # a component we own is missing: the total would be an undercount
            return self._failed(float(m.time), "; ".join(notes))
        if self.gpu_indices and float(m.time) < self.min_window_s:
            notes.append(
                f"window {m.time:.2f} s shorter than the GPU counter's resolution "
                f"(~{self.min_window_s:g} s)"
            )
        return EnergyWindow(
            source=self.source,
            measured=True,
            seconds=float(m.time),
            energy_j=sum(x for x in (gpu_j, cpu_j, dram_j) if x is not None),
            energy_gpu_j=gpu_j,
            energy_cpu_j=cpu_j,
            energy_dram_j=dram_j,
            note="; ".join(notes),
        )
