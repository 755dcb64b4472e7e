"""GPU energy from NVML: the total-energy counter where it exists, else integrated power polling.

Facts used (NVML API reference; ml-energy/zeus
``zeus/device/gpu/nvidia.py``):
- ``nvmlDeviceGetTotalEnergyConsumption`` gives millijoules since the driver loaded, on Volta
  and newer (``nvmlDeviceGetArchitecture >= NVML_DEVICE_ARCH_VOLTA``). It advances in steps of
  ~100 ms, so windows under ~1 s are flagged.
- Otherwise we poll power on a background thread and integrate with the trapezoid rule. The
  reading is field ``NVML_FI_DEV_POWER_INSTANT`` (current power, GPU scope) where the driver has
  it, else ``nvmlDeviceGetPowerUsage``, which is instantaneous on the pre-Volta GPUs that lack
  the counter. Polled power is less accurate (the sensor samples part of the time, arXiv
  2312.02741); the window's note says which path was used.
- Indices are CUDA indices (after ``CUDA_VISIBLE_DEVICES``); NVML counts physical devices, so they
  are mapped through ``CUDA_VISIBLE_DEVICES``. MIG slices cannot be measured.
- With ``sample_power`` the meter also polls power on counter devices, for the window's peak
  (the ``power-limit`` workload stores it beside the limit); their energy still comes from the
  counter. Samples are ``nvmlDeviceGetPowerUsage`` (a 1-second average on Ampere and newer) or
  the instant field where the driver has it.

``pynvml`` (package nvidia-ml-py) is imported lazily: importing this module never needs a driver.
A caller may hand the meter another library with pynvml's calls (``library``): an emulated GPU's
(`greenbench.hardware.nvml_model`), whose windows then carry the emulated source, never ``nvml``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any, ClassVar

from greenbench.energy.base import EnergyWindow, Meter, PowerSample, Probe
from greenbench.errors import MeterUnavailable


def _pynvml() -> Any:
    import pynvml  # nvidia-ml-py

    return pynvml


def _describe(e: BaseException) -> str:
    try:
        return f"{type(e).__name__}: {e}"
    except Exception:  # NVMLError.__str__ calls into the library
        return type(e).__name__


def nvml_index(cuda_index: int, visible: str | None) -> int | str:
    """NVML index (or GPU UUID) of CUDA device ``cuda_index`` given CUDA_VISIBLE_DEVICES."""
    if visible is None:
        return cuda_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if cuda_index >= len(entries):
        raise MeterUnavailable(
            f"nvml: CUDA device {cuda_index} not visible (CUDA_VISIBLE_DEVICES={visible!r})"
        )
    entry = entries[cuda_index]
    if entry.startswith("MIG"):
        raise MeterUnavailable(
            "nvml: CUDA_VISIBLE_DEVICES names a MIG slice, whose energy NVML cannot measure; "
            "measure the whole GPU (integer indices) or use --energy-source estimate"
        )
    return int(entry) if entry.isdigit() else entry


def trapezoid_j(points: Sequence[tuple[float, float]]) -> float:
    """Energy in joules of (t_s, power_w) points by the trapezoid rule."""
    return sum(0.5 * (p0 + p1) * (t1 - t0) for (t0, p0), (t1, p1) in pairwise(points))


class NvmlMeter(Meter):
    """Energy of the GPUs this rank owns (CUDA indices), read through NVML."""

    source: ClassVar[str] = "nvml"
    measured: ClassVar[bool] = True
    min_window_s: ClassVar[float] = 1.0

    def __init__(
        self,
        device_indices: list[int],
        *,
        poll_hz: float = 20.0,
        sample_power: bool = False,
        library: Any = None,
        source: str | None = None,
        measured: bool | None = None,
    ) -> None:
        """``library``: pynvml's calls from elsewhere (an emulated GPU's), its devices indexed
        as given (no ``CUDA_VISIBLE_DEVICES`` mapping); ``source``/``measured`` label its
        windows."""
        if source is not None:
            self.source = source
        if measured is not None:
            self.measured = measured
        try:
            self._nv = library if library is not None else _pynvml()
            self._nv.nvmlInit()
        except Exception as e:
            raise MeterUnavailable(f"nvml: cannot initialise NVML ({_describe(e)})") from e
        self.device_indices = list(device_indices)
        self.poll_s = 1.0 / poll_hz
        self.sample_power = sample_power
        visible = os.environ.get("CUDA_VISIBLE_DEVICES") if library is None else None
        self._handles: dict[int, Any] = {}
        self._counter: dict[int, bool] = {}
        self._read_power_mw: dict[int, Callable[[], int]] = {}
        try:
            for i in self.device_indices:
                where = nvml_index(i, visible)
                h = (
                    self._nv.nvmlDeviceGetHandleByIndex(where)
                    if isinstance(where, int)
                    else self._nv.nvmlDeviceGetHandleByUUID(where)
                )
                self._handles[i] = h
                arch = self._nv.nvmlDeviceGetArchitecture(h)
                self._counter[i] = arch >= self._nv.NVML_DEVICE_ARCH_VOLTA
                if self._counter[i]:
                    try:  # Volta+ whose driver still refuses the counter (some vGPUs)
                        self._nv.nvmlDeviceGetTotalEnergyConsumption(h)
                    except self._nv.NVMLError:
                        self._counter[i] = False
                if not self._counter[i] or sample_power:
                    self._read_power_mw[i] = self._power_reader(h)
        except MeterUnavailable:
            self._nv.nvmlShutdown()
            raise
        except Exception as e:
            self._nv.nvmlShutdown()
            msg = f"nvml: cannot open GPU(s) {device_indices}: {_describe(e)}"
            raise MeterUnavailable(msg) from e
        self._start_mj: dict[int, int] = {}
        self._points: dict[int, list[tuple[float, float]]] = {}
        self._error: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None

    def _power_reader(self, handle: Any) -> Callable[[], int]:
        """Instant-power field where the driver supports it, else nvmlDeviceGetPowerUsage (mW)."""
        nv = self._nv

        def field_mw() -> int:
            fields = [(nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_POWER_SCOPE_GPU)]
            v = nv.nvmlDeviceGetFieldValues(handle, fields)[0]
            if v.nvmlReturn != nv.NVML_SUCCESS:
                raise nv.NVMLError(v.nvmlReturn)
            return int(v.value.uiVal)

        try:
            field_mw()
            return field_mw
        except Exception:
            return lambda: int(nv.nvmlDeviceGetPowerUsage(handle))

    @property
    def counter_devices(self) -> list[int]:
        return [i for i in self.device_indices if self._counter[i]]

    @property
    def polled_devices(self) -> list[int]:
        return [i for i in self.device_indices if not self._counter[i]]

    @property
    def sampled_devices(self) -> list[int]:
        """Devices whose power is polled: those without the counter, and every one when
        ``sample_power``."""
        return [i for i in self.device_indices if i in self._read_power_mw]

    @classmethod
    def probe(cls) -> Probe:
        try:
            nv = _pynvml()
        except ImportError:
            return Probe(cls.source, False, "pynvml not importable: pip install nvidia-ml-py")
        try:
            nv.nvmlInit()
        except Exception as e:
            return Probe(
                cls.source, False, f"NVML unavailable ({_describe(e)}): no NVIDIA GPU or driver"
            )
        try:
            gpus = []
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                name = nv.nvmlDeviceGetName(h)
                name = name.decode() if isinstance(name, bytes) else str(name)
                counter = nv.nvmlDeviceGetArchitecture(h) >= nv.NVML_DEVICE_ARCH_VOLTA
                gpus.append({"index": i, "name": name, "energy_counter": counter})
        except Exception as e:
            return Probe(cls.source, False, f"NVML initialised but devices unreadable: {e!r}")
        finally:
            nv.nvmlShutdown()
        if not gpus:
            return Probe(cls.source, False, "NVML loaded but reports no GPU", {"gpus": []})
        n_counter = sum(g["energy_counter"] for g in gpus)
        return Probe(
            cls.source,
            True,
            f"{len(gpus)} GPU(s); {n_counter} with the energy counter (Volta+), "
            f"{len(gpus) - n_counter} by power polling",
            {"gpus": gpus},
        )

    def _sample(self) -> None:
        """One power reading per sampled device (caller holds the lock)."""
        assert self._t0 is not None
        for i in self.sampled_devices:
            mw = self._read_power_mw[i]()
            self._points[i].append((time.perf_counter() - self._t0, mw / 1000.0))

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            with self._lock:
                try:
                    self._sample()
                except Exception as e:
                    self._error = _describe(e)
                    return

    def begin(self) -> None:
        self._stop_thread()
        self._error = None
        self._points = {i: [] for i in self.sampled_devices}
        try:
            self._start_mj = {
                i: self._nv.nvmlDeviceGetTotalEnergyConsumption(self._handles[i])
                for i in self.counter_devices
            }
            self._t0 = time.perf_counter()
            with self._lock:
                self._sample()
        except Exception as e:
            self._t0 = time.perf_counter()
            self._error = _describe(e)
            return
        if self.sampled_devices:
            self._stop.clear()
            self._thread = threading.Thread(target=self._poll, name="greenbench-nvml", daemon=True)
            self._thread.start()

    def _stop_thread(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def end(self) -> EnergyWindow:
        if self._t0 is None:
            raise RuntimeError("NvmlMeter.end() called without begin()")
        energy: dict[int, float] = {}
        with self._lock:
            if self._error is None:
                try:
                    for i in self.counter_devices:
                        now = self._nv.nvmlDeviceGetTotalEnergyConsumption(self._handles[i])
                        energy[i] = (now - self._start_mj[i]) / 1000.0
                    self._sample()
                except Exception as e:
                    self._error = _describe(e)
            seconds = time.perf_counter() - self._t0
        self._stop_thread()
        self._t0 = None
        if self._error is not None:
            return EnergyWindow(
                self.source, self.measured, seconds, None, note=f"read error: {self._error}"
            )
        still = [i for i in self.counter_devices if energy[i] <= 0.0]
        if still and seconds < self.min_window_s:
            # the counter did not tick: the window is below its resolution, not free of energy
            return EnergyWindow(
                self.source,
                self.measured,
                seconds,
                None,
                note=f"energy unknown: GPU(s) {still}'s energy counter did not advance in a "
                f"{seconds:.3f} s window (shorter than its resolution, ~{self.min_window_s:g} s)",
            )
        samples: list[PowerSample] = []
        for i, points in self._points.items():
            if not self._counter[i]:
                energy[i] = trapezoid_j(points)
            samples += [PowerSample(t, w, f"gpu{i}") for t, w in points]
        notes = []
        if self.polled_devices:
            notes.append(
                f"GPU(s) {self.polled_devices} by power polling at {1 / self.poll_s:g} Hz "
                "(no energy counter; less accurate)"
            )
        if self.counter_devices and seconds < self.min_window_s:
            notes.append(
                f"window {seconds:.2f} s shorter than the energy counter's resolution "
                f"(~{self.min_window_s:g} s)"
            )
        total = sum(energy.values())
        return EnergyWindow(
            source=self.source,
            measured=self.measured,
            seconds=seconds,
            energy_j=total,
            energy_gpu_j=total,
            samples=tuple(sorted(samples, key=lambda s: s.t_s)),
            note="; ".join(notes),
        )

    def close(self) -> None:
        self._stop_thread()
        if self._handles:
            self._handles = {}
            self._nv.nvmlShutdown()
