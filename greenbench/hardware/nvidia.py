"""This machine's NVIDIA GPUs as CUDA numbers them, read through NVML: no torch.

What a process that has not imported torch needs to know of the GPUs (``greenbench measure``
deciding ``--device auto`` and naming its devices, the machine's fingerprint): torch's import
costs seconds, NVML's milliseconds. CUDA numbers the devices ``CUDA_VISIBLE_DEVICES`` lists, in
its order (physical indices or GPU UUIDs; an empty value hides every GPU); NVML numbers every
physical device, so the list is mapped through it. An entry naming a MIG slice, or one that is
no device, ends the list, as an entry CUDA cannot use ends CUDA's. Without the NVIDIA driver or
``nvidia-ml-py`` there are no GPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class VisibleGpu:
    """One GPU a CUDA program here would see: its CUDA index, name and memory."""

    index: int
    name: str
    memory_bytes: int | None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_gpus(visible: str | None = None, library: Any = None) -> list[VisibleGpu]:
    """The GPUs CUDA would number here, in its order (module docstring); ``visible`` stands for
    ``$CUDA_VISIBLE_DEVICES`` and ``library`` for ``pynvml`` (tests)."""
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        nv = library
        if nv is None:
            import pynvml as nv
        nv.nvmlInit()
    except Exception:  # no driver, no nvidia-ml-py: no GPU to see
        return []
    try:
        count = int(nv.nvmlDeviceGetCount())
        wanted: list[int | str] = list(range(count))
        if visible is not None:
            wanted = []
            for entry in (e.strip() for e in visible.split(",")):
                if not entry or entry.startswith("MIG"):
                    break
                wanted.append(int(entry) if entry.isdigit() else entry)
        gpus = []
        for cuda_index, where in enumerate(wanted):
            if isinstance(where, int) and not 0 <= where < count:
                break
            handle = (
                nv.nvmlDeviceGetHandleByIndex(where)
                if isinstance(where, int)
                else nv.nvmlDeviceGetHandleByUUID(where)
            )
            try:
                memory: int | None = int(nv.nvmlDeviceGetMemoryInfo(handle).total)
            except Exception:  # some virtual GPUs refuse it
                memory = None
            gpus.append(VisibleGpu(cuda_index, _text(nv.nvmlDeviceGetName(handle)), memory))
        return gpus
    except Exception:  # a device NVML cannot open: what it could read so far is not the list
        return []
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def driver_version(library: Any = None) -> str | None:
    """The NVIDIA driver's version, or None without one (or without ``nvidia-ml-py``)."""
    try:
        nv = library
        if nv is None:
            import pynvml as nv
        nv.nvmlInit()
    except Exception:
        return None
    try:
        return _text(nv.nvmlSystemGetDriverVersion())
    except Exception:
        return None
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
