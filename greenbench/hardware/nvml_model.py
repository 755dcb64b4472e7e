"""An emulated NVML: the pynvml calls greenbench makes, answered by the power model of a GPU type.

Why: the power-limit path (record, set, measure, restore, refuse) must run end to end on machines
without a GPU, and no one may change the power limit of a real GPU they share. With
``emulate.gpu`` set (`greenbench.spec`), CPU ranks stand in for GPUs of that type and every NVML
call goes to an `NvmlModel` instead of the driver: it can never reach a real device. It answers
with `greenbench.hardware.gpu_model` (a documented model, not a measurement), so whatever it
reports is labelled emulated wherever it is stored or shown.

What the emulated driver keeps, like a real one, across processes: each device's power limit and
its energy counter. Both live in one JSON file per GPU type under the machine cache
(``cache_dir()/emulated-gpus/``), read and written under an exclusive lock, so the launcher that
sets a limit, the ranks that read energy, and the next command that restores a limit after a
SIGKILL all see one device. The counter advances, at each read, by the model's power over the
time since the last read, at the busy fraction of the process that reads it: the CPU time it used
over the wall time since its own previous read of that device, over the cores it may use
(``OMP_NUM_THREADS``, which the launcher sets per rank, else all). The launcher reading idle power
while it sleeps is idle; other processes on the machine do not count (they are not the emulated
GPU's work).

**A device its rank drives** (`NvmlModel.drive`, for this object only, until `release`): its
counter no longer follows the wall clock; it advances only by the device time the rank reports
(`NvmlModel.run`: the model's time of the steps it trained, `greenbench.rank.emulated_gpu`), at
the busy power the limit allows, and its power reads that busy power. So an emulated GPU's energy
is the model's over the model's time, whatever else kept the CPU busy meanwhile.

The file also keeps each configuration's **base step** (`NvmlModel.base_step`): how long one step
of it takes at full clock, measured once on the CPU and applied to every limit
(`greenbench.rank.emulated_gpu`), the way a real GPU's speed on a workload does not change from
one run to the next.

The emulated driver grants limit changes (an emulated GPU needs no root) unless its state says
``"grants_changes": false`` (`NvmlModel.configure`), which emulates a user without root or zeusd.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml  # constants and error types only: importing it never loads the driver

from greenbench.hardware.gpu_model import MAX_SM_CLOCK_MHZ, GpuPowerModel
from greenbench.hardware.gpus import DEVICE_TYPES, gpu_facts
from greenbench.hardware.machine import cache_dir

#: emulated GPUs on one host (an HGX board's eight)
DEVICES = 8
DRIVER_VERSION = "greenbench-emulated (power model, not a driver)"


class EmulationError(ValueError):
    """An emulated GPU type that the GPU table does not know."""


def process_cpu_s() -> float:
    """CPU seconds this process has used (every thread, user and system)."""
    t = os.times()
    return t.user + t.system


def cores_allowed() -> int:
    """The cores this process's work may use: ``OMP_NUM_THREADS``, else all."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class Handle:
    """An emulated device handle: its index."""

    index: int


class NvmlModel:
    """The subset of pynvml greenbench calls, for ``count`` emulated GPUs of one type.

    Constants (``NVML_*``) and ``NVMLError`` are pynvml's own, so code written against pynvml
    runs unchanged; errors are raised as the driver would raise them (``NVMLError`` with its
    code: no permission, invalid argument, not supported).
    """

    NVMLError = pynvml.NVMLError

    def __init__(self, model: GpuPowerModel, state_path: Path, count: int = DEVICES) -> None:
        self.model = model
        self.state_path = Path(state_path)
        self.count = count
        self.emulated = model.label
        #: this process's previous read of each device: (wall time, its CPU seconds then)
        self._mine: dict[int, tuple[float, float]] = {}
        #: the devices this object drives (`drive`): their time is the device time `run` gives
        self._driven: set[int] = set()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # ------------------------------------------------------------------ the state file

    def _fresh(self) -> dict[str, Any]:
        device = {
            "limit_mw": round(self.model.default_limit_w * 1000),
            "energy_mj": 0.0,
            "t": time.time(),
        }
        return {"gpu": self.model.label, "grants_changes": True, "devices": [device] * self.count}

    @contextlib.contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        """The state, locked for this process until the block ends, then written back."""
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.state_path.with_name(self.state_path.name + ".lock")
        with lock.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                try:
                    state = json.loads(self.state_path.read_text())
                except (OSError, ValueError):
                    state = self._fresh()
                state["devices"] = [dict(d) for d in state["devices"]]
                yield state
                tmp = self.state_path.with_name(f".{self.state_path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(state))
                tmp.replace(self.state_path)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _device(self, state: dict[str, Any], handle: Handle) -> dict[str, Any]:
        if not isinstance(handle, Handle) or not 0 <= handle.index < self.count:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return state["devices"][handle.index]

    def _load(self, index: int, now: float) -> float:
        """This process's busy fraction since its previous read of device ``index`` (0 for
        its first: nothing is known of the time before)."""
        cpu = process_cpu_s()
        before = self._mine.get(index)
        self._mine[index] = (now, cpu)
        if before is None or now <= before[0]:
            return 0.0
        return (cpu - before[1]) / ((now - before[0]) * cores_allowed())

    def _advance(self, device: dict[str, Any], index: int) -> float:
        """Move a device's counter to now; return its power over the elapsed time (W). A driven
        device's wall time draws nothing (its time is what `run` gives) and its power is the
        busy power."""
        now = time.time()
        limit_w = device["limit_mw"] / 1000
        if index in self._driven:
            power_w = self.model.power_w(limit_w, 1.0)
        else:
            power_w = self.model.power_w(limit_w, self._load(index, now))
            device["energy_mj"] += power_w * max(now - device["t"], 0.0) * 1000
        device.update(t=now, power_mw=round(power_w * 1000))
        return power_w

    def drive(self, index: int) -> None:
        """From now on device ``index``'s time is the device time this object reports (`run`),
        not the wall clock (module docstring); for this object only, until `release`."""
        with self._state() as state:
            self._advance(self._device(state, Handle(index)), index)  # what came before
            self._driven.add(index)

    def run(self, index: int, seconds: float) -> None:
        """Device ``index``, driven, worked ``seconds`` of device time: its counter advances by
        the busy power under its limit over them."""
        if index not in self._driven:
            raise RuntimeError(f"emulated GPU {index} is not driven by this process: drive() it")
        if not seconds >= 0:
            raise ValueError(f"device time must be >= 0 s, got {seconds}")
        with self._state() as state:
            device = self._device(state, Handle(index))
            self._advance(device, index)
            device["energy_mj"] += (
                self.model.power_w(device["limit_mw"] / 1000, 1.0) * seconds * 1000
            )

    def release(self, index: int) -> None:
        """Device ``index`` follows the wall clock again, from now."""
        with self._state() as state:
            self._advance(self._device(state, Handle(index)), index)
            self._driven.discard(index)
            self._mine.pop(index, None)  # the busy fraction starts afresh

    def base_step(self, key: str) -> dict[str, Any] | None:
        """The base step stored for configuration ``key`` (module docstring), or None."""
        with self._state() as state:
            found = state.get("base_steps", {}).get(key)
            return dict(found) if isinstance(found, dict) else None

    def store_base_step(self, key: str, record: dict[str, Any]) -> None:
        """Keep ``record`` as configuration ``key``'s base step, replacing any before it."""
        with self._state() as state:
            state.setdefault("base_steps", {})[key] = dict(record)

    def configure(self, *, grants_changes: bool) -> None:
        """Whether the emulated driver grants limit changes (False: as for a user without root)."""
        with self._state() as state:
            state["grants_changes"] = grants_changes

    def grants_changes(self) -> bool:
        """Whether the emulated driver grants limit changes (`configure`)."""
        with self._state() as state:
            return bool(state.get("grants_changes", True))

    def limits_w(self) -> list[float]:
        """Every emulated device's current limit in watts (for tests and the doctor)."""
        with self._state() as state:
            return [d["limit_mw"] / 1000 for d in state["devices"]]

    # ------------------------------------------------------------------ pynvml's API

    def nvmlInit(self) -> None:
        with self._state():
            pass  # creates the state on first use, as loading a driver would

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return DRIVER_VERSION

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        if not 0 <= int(index) < self.count:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return Handle(int(index))

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        match = re.fullmatch(r"GPU-emulated-(\d+)", str(uuid))
        if not match:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return self.nvmlDeviceGetHandleByIndex(int(match.group(1)))

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        return f"GPU-emulated-{handle.index}"

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        return f"Emulated {self.model.label} (greenbench power model)"

    def nvmlDeviceGetArchitecture(self, handle: Handle) -> int:
        return pynvml.NVML_DEVICE_ARCH_HOPPER  # Volta or newer: the energy counter exists

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Handle) -> int:
        with self._state() as state:
            device = self._device(state, handle)
            self._advance(device, handle.index)
            return int(device["energy_mj"])

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        with self._state() as state:
            return round(self._advance(self._device(state, handle), handle.index) * 1000)

    def nvmlDeviceGetFieldValues(self, handle: Handle, fields: list[Any]) -> list[Any]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPowerManagementLimit(self, handle: Handle) -> int:
        with self._state() as state:
            return int(self._device(state, handle)["limit_mw"])

    nvmlDeviceGetEnforcedPowerLimit = nvmlDeviceGetPowerManagementLimit

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Handle) -> int:
        return round(self.model.default_limit_w * 1000)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Handle) -> tuple[int, int]:
        return round(self.model.min_limit_w * 1000), round(self.model.max_limit_w * 1000)

    def nvmlDeviceSetPowerManagementLimit(self, handle: Handle, limit_mw: int) -> None:
        low, high = self.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        with self._state() as state:
            device = self._device(state, handle)
            if not state.get("grants_changes", True):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
            if not low <= int(limit_mw) <= high:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            self._advance(device, handle.index)  # energy so far at the old limit
            device["limit_mw"] = int(limit_mw)

    def nvmlDeviceGetClockInfo(self, handle: Handle, clock: int) -> int:
        if clock != pynvml.NVML_CLOCK_SM:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._state() as state:
            return self.model.sm_clock_mhz(self._device(state, handle)["limit_mw"] / 1000)

    def nvmlDeviceGetMaxClockInfo(self, handle: Handle, clock: int) -> int:
        if clock != pynvml.NVML_CLOCK_SM:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return MAX_SM_CLOCK_MHZ


def emulated_nvml(gpu: str) -> NvmlModel:
    """The emulated NVML of GPU type ``gpu`` (a short name of the GPU table, e.g. ``h100``)."""
    label = DEVICE_TYPES.get(gpu.strip().lower())
    facts = gpu_facts(label) if label else None
    if facts is None:
        known = ", ".join(sorted(DEVICE_TYPES))
        raise EmulationError(f"emulate.gpu={gpu!r} is not a GPU type greenbench models ({known})")
    slug = re.sub(r"[^a-z0-9]+", "-", facts.label.lower()).strip("-")
    return NvmlModel(GpuPowerModel.of(facts), cache_dir() / "emulated-gpus" / f"{slug}.json")
