"""NvmlMeter with pynvml's functions patched at the library boundary."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml
import pytest

from greenbench.energy.nvml import NvmlMeter, nvml_index, trapezoid_j
from greenbench.errors import MeterUnavailable


@dataclass
class FakeGpu:
    arch: int
    energy_mj: int = 0
    power_mw: int = 0
    field_ok: bool = False  # does NVML_FI_DEV_POWER_INSTANT work on this driver?
    counter_ok: bool = True  # Volta+ whose driver still refuses the counter
    fail_counter_after: int | None = None  # raise on the n-th counter read and later
    fail_power_after: int | None = None
    counter_reads: int = 0
    power_reads: int = 0
    name: str = "Fake GPU"


@dataclass
class FakeNvml:
    gpus: list[FakeGpu]
    init_error: int | None = None
    opened: list[int] = field(default_factory=list)
    inits: int = 0
    shutdowns: int = 0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    state = FakeNvml(gpus=[])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def init() -> None:
        if state.init_error is not None:
            raise pynvml.NVMLError(state.init_error)
        state.inits += 1

    def shutdown() -> None:
        state.shutdowns += 1

    def handle(i: int) -> FakeGpu:
        state.opened.append(i)
        return state.gpus[i]

    def energy(h: FakeGpu) -> int:
        h.counter_reads += 1
        if not h.counter_ok:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if h.fail_counter_after is not None and h.counter_reads >= h.fail_counter_after:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return h.energy_mj

    def power(h: FakeGpu) -> int:
        h.power_reads += 1
        if h.fail_power_after is not None and h.power_reads >= h.fail_power_after:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return h.power_mw

    def field_values(h: FakeGpu, fields: list[tuple[int, int]]) -> list[SimpleNamespace]:
        assert fields == [(pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_POWER_SCOPE_GPU)]
        if not h.field_ok:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        h.power_reads += 1
        value = SimpleNamespace(uiVal=h.power_mw)
        return [SimpleNamespace(nvmlReturn=pynvml.NVML_SUCCESS, value=value)]

    for name, fn in {
        "nvmlInit": init,
        "nvmlShutdown": shutdown,
        "nvmlDeviceGetCount": lambda: len(state.gpus),
        "nvmlDeviceGetHandleByIndex": handle,
        "nvmlDeviceGetArchitecture": lambda h: h.arch,
        "nvmlDeviceGetTotalEnergyConsumption": energy,
        "nvmlDeviceGetPowerUsage": power,
        "nvmlDeviceGetFieldValues": field_values,
        "nvmlDeviceGetName": lambda h: h.name,
    }.items():
        monkeypatch.setattr(pynvml, name, fn)
    return state


AMPERE, PASCAL = pynvml.NVML_DEVICE_ARCH_AMPERE, pynvml.NVML_DEVICE_ARCH_PASCAL


def test_counter_path(fake: FakeNvml) -> None:
    fake.gpus = [FakeGpu(AMPERE, energy_mj=1_000_000), FakeGpu(AMPERE, energy_mj=2_000_000)]
    meter = NvmlMeter([0, 1])
    assert meter.counter_devices == [0, 1] and meter.polled_devices == []
    meter.begin()
    fake.gpus[0].energy_mj = 1_250_000  # +250 J
    fake.gpus[1].energy_mj = 2_500_000  # +500 J
    w = meter.end()
    assert w.source == "nvml" and w.measured is True
    assert w.energy_j == pytest.approx(750.0)
    assert w.energy_gpu_j == pytest.approx(750.0)
    assert w.energy_cpu_j is None and w.samples == ()
    assert "shorter than the energy counter" in w.note  # a window of microseconds
    assert all(g.power_reads == 0 for g in fake.gpus)  # the counter path never polls


def test_a_counter_that_did_not_advance_in_a_short_window_reads_unknown(fake: FakeNvml) -> None:
    """A window shorter than the counter's resolution in which it never ticked has an unknown
    energy, not 0 J (a 26 ms window on an H200 read 0 J and showed 0 J/token)."""
    fake.gpus = [FakeGpu(AMPERE, energy_mj=1_000_000)]
    meter = NvmlMeter([0])
    meter.begin()
    w = meter.end()
    assert w.energy_j is None and w.measured is True
    assert "did not advance" in w.note and "resolution" in w.note


def test_power_polling_for_pre_volta(fake: FakeNvml) -> None:
    fake.gpus = [FakeGpu(PASCAL, power_mw=150_000)]
    meter = NvmlMeter([0], poll_hz=100)
    assert meter.polled_devices == [0]
    meter.begin()
    time.sleep(0.05)
    w = meter.end()
    assert w.energy_j is not None
    assert len(w.samples) >= 2
    assert {s.component for s in w.samples} == {"gpu0"}
    assert all(s.power_w == 150.0 for s in w.samples)
    assert w.samples[0].t_s == pytest.approx(0.0, abs=0.01)
    # constant 150 W integrated from the first to the last sample
    assert w.energy_j == pytest.approx(150.0 * (w.samples[-1].t_s - w.samples[0].t_s))
    assert "power polling" in w.note
    assert fake.gpus[0].counter_reads == 0  # pre-Volta: the counter is never asked


def test_instant_power_field_preferred(fake: FakeNvml) -> None:
    fake.gpus = [FakeGpu(PASCAL, power_mw=200_000, field_ok=True)]
    meter = NvmlMeter([0])
    meter.begin()
    fake.gpus[0].power_mw = 999_000_000  # if nvmlDeviceGetPowerUsage were used: not this
    w = meter.end()
    assert w.samples[0].power_w == 200.0
    assert w.samples[-1].power_w == 999_000.0


def test_volta_without_counter_falls_back_to_polling(fake: FakeNvml) -> None:
    fake.gpus = [FakeGpu(AMPERE, power_mw=80_000, counter_ok=False)]
    meter = NvmlMeter([0])
    assert meter.polled_devices == [0]
    meter.begin()
    w = meter.end()
    assert w.energy_j is not None and w.samples[0].power_w == 80.0


def test_read_error_mid_window_counter(fake: FakeNvml) -> None:
    fake.gpus = [FakeGpu(AMPERE, energy_mj=5, fail_counter_after=3)]  # init probe, begin ok
    meter = NvmlMeter([0])
    meter.begin()
    w = meter.end()
    assert w.energy_j is None and w.energy_gpu_j is None
    assert w.note.startswith("read error:")


def test_read_error_mid_window_polling(fake: FakeNvml) -> None:
    fake.gpus = [FakeGpu(PASCAL, power_mw=100_000, fail_power_after=2)]  # begin sample ok
    meter = NvmlMeter([0])
    meter.begin()
    w = meter.end()
    assert w.energy_j is None
    assert w.note.startswith("read error:")


def test_trapezoid() -> None:
    assert trapezoid_j([(0.0, 100.0), (1.0, 200.0), (3.0, 200.0)]) == pytest.approx(550.0)
    assert trapezoid_j([(0.0, 100.0)]) == 0.0


def test_cuda_visible_devices_mapping(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    assert nvml_index(1, None) == 1
    assert nvml_index(1, "2,3") == 3
    assert nvml_index(0, "GPU-8d2f") == "GPU-8d2f"
    with pytest.raises(MeterUnavailable, match="not visible"):
        nvml_index(2, "0,1")
    with pytest.raises(MeterUnavailable, match="MIG"):
        nvml_index(0, "MIG-GPU-1/0/0")
    fake.gpus = [FakeGpu(AMPERE) for _ in range(4)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    NvmlMeter([1])
    assert fake.opened == [3]


def test_probe_and_init_failure(fake: FakeNvml) -> None:
    fake.gpus = [FakeGpu(AMPERE, name="NVIDIA A100"), FakeGpu(PASCAL, name="Tesla P100")]
    p = NvmlMeter.probe()
    assert p.available
    assert [g["energy_counter"] for g in p.details["gpus"]] == [True, False]
    assert fake.inits == fake.shutdowns == 1
    fake.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    p = NvmlMeter.probe()
    assert not p.available and "NVML unavailable" in p.reason
    with pytest.raises(MeterUnavailable, match="cannot initialise NVML"):
        NvmlMeter([0])


def test_probe_without_gpus(fake: FakeNvml) -> None:
    assert not NvmlMeter.probe().available


def test_close_shuts_nvml_down(fake: FakeNvml) -> None:
    fake.gpus = [FakeGpu(AMPERE)]
    meter = NvmlMeter([0])
    meter.close()
    assert fake.shutdowns == 1
