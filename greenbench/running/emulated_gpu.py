"""``emulate.gpu``: CPU ranks standing in for GPUs of one type, to try and test the GPU power path
(limits, their restore, the ``power-limit`` workload, its report) on a machine without a GPU.

Each rank trains on the CPU as usual. Its "GPU" is device ``local_rank`` of an emulated NVML
(`greenbench.hardware.nvml_model`): the launcher sets that device's power limit through it
(`greenbench.running.power_limits`), the rank reads the device's energy through the ordinary NVML
meter, and every step is stretched by the emulated clock's slowdown (maximum over current SM
clock, as the emulated NVML reports them) by burning compute, so that a capped device is slower
and, at the model's power, spends its energy over the longer time, as a real one does. No real
GPU is ever touched. Energy is labelled `EMULATED_SOURCE` (shown "emulated (GPU power model)"),
never measured, and the run's device type says emulated, so no such result is pooled or compared
with a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from greenbench.energy.nvml import NvmlMeter
from greenbench.errors import SpecError
from greenbench.hardware.nvml_model import EmulationError, NvmlModel, emulated_nvml
from greenbench.vocabulary import EMULATED_SOURCE


def emulated(settings: Mapping[str, Any]) -> str:
    """The emulated GPU type of a run ("" when its devices are what they are)."""
    return str(settings.get("emulate.gpu", "") or "")


def library(settings: Mapping[str, Any]) -> NvmlModel | None:
    """The emulated NVML of a run, or None for the real driver."""
    gpu = emulated(settings)
    if not gpu:
        return None
    try:
        return emulated_nvml(gpu)
    except EmulationError as e:
        raise SpecError(str(e)) from None


def meter(settings: Mapping[str, Any], indices: Sequence[int], *, sample_power: bool) -> NvmlMeter:
    """The energy meter of emulated devices ``indices``: NVML's, labelled emulated."""
    return NvmlMeter(
        list(indices),
        library=library(settings),
        sample_power=sample_power,
        source=EMULATED_SOURCE,
        measured=False,
    )


def stretch(settings: Mapping[str, Any], index: int) -> float:
    """How many times as long this rank's steps must take (1 without emulation): the emulated
    device's maximum SM clock over its current one, as its NVML reports them."""
    nv = library(settings)
    if nv is None:
        return 1.0
    h = nv.nvmlDeviceGetHandleByIndex(index)
    now = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
    return max(1.0, nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM) / max(now, 1))


def device_type(settings: Mapping[str, Any]) -> str | None:
    """The ``runs.device_type`` of an emulated run (None when not emulated)."""
    nv = library(settings)
    return None if nv is None else f"emulated:{nv.emulated}"
