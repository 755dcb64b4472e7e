"""ZeusMeter with zeus.monitor.ZeusMonitor (and Zeus's device probes) patched."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import zeus.device.cpu
import zeus.device.gpu
import zeus.monitor
from zeus.device.cpu.common import ZeusCPUInitError
from zeus.device.gpu.common import ZeusGPUInitError
from zeus.monitor.energy import Measurement

from greenbench.energy.zeus import ZeusMeter
from greenbench.errors import MeterUnavailable


class FakeMonitor:
    instances: ClassVar[list[FakeMonitor]] = []
    result = Measurement(time=2.0, gpu_energy={0: 100.0, 1: 50.0}, cpu_energy={0: 30.0},
                         dram_energy={0: 5.0})  # fmt: skip
    fail_end = False

    def __init__(self, gpu_indices: list[int] | None = None, cpu_indices: Any = None) -> None:
        self.gpu_indices, self.cpu_indices = gpu_indices, cpu_indices
        self.calls: list[tuple[str, str, bool]] = []
        FakeMonitor.instances.append(self)

    def begin_window(self, key: str, sync_execution: bool = True) -> None:
        self.calls.append(("begin", key, sync_execution))

    def end_window(self, key: str, sync_execution: bool = True, cancel: bool = False) -> Any:
        self.calls.append(("end", key, sync_execution))
        if self.fail_end:
            raise RuntimeError("NVML lost the GPU")
        return self.result


@pytest.fixture
def monitor(monkeypatch: pytest.MonkeyPatch) -> type[FakeMonitor]:
    FakeMonitor.instances = []
    monkeypatch.setattr(zeus.monitor, "ZeusMonitor", FakeMonitor)
    monkeypatch.setattr(FakeMonitor, "fail_end", False)
    return FakeMonitor


def test_measurement_maps_to_window(monitor: type[FakeMonitor]) -> None:
    meter = ZeusMeter(gpu_indices=[0, 1], cpu_indices=[0])
    fake = monitor.instances[0]
    assert (fake.gpu_indices, fake.cpu_indices) == ([0, 1], [0])
    meter.begin()
    w = meter.end()
    assert w.source == "zeus" and w.measured is True
    assert w.energy_gpu_j == pytest.approx(150.0)
    assert w.energy_cpu_j == pytest.approx(30.0)
    assert w.energy_dram_j == pytest.approx(5.0)
    assert w.energy_j == pytest.approx(185.0)
    assert w.seconds == 2.0
    assert w.note == ""  # 2 s is above the resolution


def test_windows_are_unsynchronised_and_uniquely_named(monitor: type[FakeMonitor]) -> None:
    meter = ZeusMeter(gpu_indices=[0], cpu_indices=[])
    for _ in range(2):
        meter.begin()
        meter.end()
    calls = monitor.instances[0].calls
    assert [c[0] for c in calls] == ["begin", "end", "begin", "end"]
    assert all(sync is False for _, _, sync in calls)
    assert calls[0][1] == calls[1][1] != calls[2][1] == calls[3][1]


def test_gpu_only_meter_ignores_cpu_fields(monitor: type[FakeMonitor]) -> None:
    meter = ZeusMeter(gpu_indices=[0, 1])
    assert monitor.instances[0].cpu_indices == []  # not None: Zeus's None means "all"
    meter.begin()
    w = meter.end()
    assert w.energy_j == pytest.approx(150.0) and w.energy_cpu_j is None


def test_missing_component_is_a_read_error(
    monitor: type[FakeMonitor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(monitor, "result", Measurement(time=3.0, gpu_energy={}))
    meter = ZeusMeter(gpu_indices=[0])
    meter.begin()
    w = meter.end()
    assert w.energy_j is None and w.note.startswith("read error:")


def test_end_window_failure_gives_none(
    monitor: type[FakeMonitor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(monitor, "fail_end", True)
    meter = ZeusMeter(cpu_indices=[0])
    meter.begin()
    w = meter.end()
    assert w.energy_j is None and "NVML lost the GPU" in w.note


def test_nothing_to_measure() -> None:
    with pytest.raises(MeterUnavailable, match="nothing to measure"):
        ZeusMeter()


def _raise(exc: Exception) -> Any:
    def f() -> Any:
        raise exc

    return f


def test_probe_finds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zeus.device.gpu, "get_gpus", _raise(ZeusGPUInitError("no NVML")))
    monkeypatch.setattr(zeus.device.cpu, "get_cpus", _raise(ZeusCPUInitError("no RAPL")))
    p = ZeusMeter.probe()
    assert not p.available
    assert "no NVML" in p.reason and "no RAPL" in p.reason
    assert (p.details["gpus"], p.details["cpus"]) == (0, 0)


def test_probe_finds_cpu_rapl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zeus.device.gpu, "get_gpus", _raise(ZeusGPUInitError("no NVML")))
    monkeypatch.setattr(zeus.device.cpu, "get_cpus", lambda: ["socket0", "socket1"])
    p = ZeusMeter.probe()
    assert p.available
    assert (p.details["gpus"], p.details["cpus"]) == (0, 2)
