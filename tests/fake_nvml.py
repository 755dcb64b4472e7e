"""NVML faked at pynvml's boundary for the power-limit tests: two H100s whose limits a process
may change (as root) or not, and a process's capabilities as /proc/self/status shows them.
Tests import the ``nvml`` fixture (``from fake_nvml import nvml_fixture``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pynvml
import pytest


@dataclass
class Gpu:
    """A GPU as NVML reports it: limits in milliwatts."""

    uuid: str
    limit_mw: int = 700_000
    default_mw: int = 700_000
    low_mw: int = 200_000
    high_mw: int = 700_000
    name: str = "NVIDIA H100 80GB HBM3"


@dataclass
class FakeNvml:
    gpus: list[Gpu] = field(default_factory=list)
    root: bool = True  # whether the driver lets this process change limits
    sets: list[tuple[str, int]] = field(default_factory=list)
    init_error: int | None = None


@pytest.fixture(name="nvml")
def nvml_fixture(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """pynvml's power-limit calls answered by two H100s (import this fixture to use it)."""
    state = FakeNvml([Gpu(f"GPU-{i}") for i in range(2)])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def init() -> None:
        if state.init_error is not None:
            raise pynvml.NVMLError(state.init_error)

    def set_limit(h: Gpu, mw: int) -> None:
        if not state.root:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        if not h.low_mw <= mw <= h.high_mw:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        state.sets.append((h.uuid, mw))
        h.limit_mw = mw

    def by_uuid(uuid: str) -> Gpu:
        return next(g for g in state.gpus if g.uuid == uuid)

    for name, fn in {
        "nvmlInit": init,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(state.gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: state.gpus[i],
        "nvmlDeviceGetHandleByUUID": by_uuid,
        "nvmlDeviceGetName": lambda h: h.name,
        "nvmlDeviceGetUUID": lambda h: h.uuid,
        "nvmlDeviceGetPowerManagementLimit": lambda h: h.limit_mw,
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: h.default_mw,
        "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: (h.low_mw, h.high_mw),
        "nvmlDeviceSetPowerManagementLimit": set_limit,
    }.items():
        monkeypatch.setattr(pynvml, name, fn)
    return state


def status_file(tmp_path: Path, cap_eff: int) -> Path:
    path = tmp_path / "status"
    path.write_text(f"Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t{cap_eff:016x}\n")
    return path


ROOT_CAPS = 0x000001FFFFFFFFFF
USER_CAPS = 0
