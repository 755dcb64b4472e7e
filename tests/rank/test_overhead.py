"""greenbench.rank.overhead: what measuring costs a step, timed directly. The meters are the
real classes with their hardware faked at the boundary (pynvml's functions, a powercap tree), so
a reading's cost and the number of readings are known."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
import torch

from greenbench.energy.estimate import EstimateMeter
from greenbench.energy.nvml import NvmlMeter
from greenbench.energy.ranks import NullMeter
from greenbench.energy.rapl import RaplMeter
from greenbench.rank.overhead import (
    Overhead,
    measure_overhead,
    readings_per_step,
    sampler_hz,
    timer_cost_s,
)

READ_S = 2e-4  # what one fake NVML reading costs


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@dataclass
class FakeGpu:
    arch: int
    reads: int = 0


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> list[FakeGpu]:
    """pynvml faked at its functions; every reading (energy counter or power field) spins for
    ``READ_S`` and is counted on its GPU."""
    state: list[FakeGpu] = []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def read(h: FakeGpu) -> int:
        h.reads += 1
        spin(READ_S)
        return 1000 * h.reads

    def power_mw(h: FakeGpu) -> int:
        read(h)
        return 150_000

    def field_values(h: FakeGpu, fields: list) -> list[SimpleNamespace]:
        value = SimpleNamespace(uiVal=power_mw(h))
        return [SimpleNamespace(nvmlReturn=pynvml.NVML_SUCCESS, value=value)]

    for name, fn in {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetHandleByIndex": lambda i: state[i],
        "nvmlDeviceGetArchitecture": lambda h: h.arch,
        "nvmlDeviceGetTotalEnergyConsumption": read,
        "nvmlDeviceGetFieldValues": field_values,
        "nvmlDeviceGetPowerUsage": power_mw,
    }.items():
        monkeypatch.setattr(pynvml, name, fn)
    return state


def test_an_energy_counter_is_read_twice_a_window(gpus: list[FakeGpu]) -> None:
    gpus.append(FakeGpu(pynvml.NVML_DEVICE_ARCH_HOPPER))
    meter = NvmlMeter([0])
    assert gpus[0].reads == 1  # the constructor's check that the counter answers
    try:
        over = measure_overhead(
            meter, step_s=0.05, steps_per_window=20, reading_calls=10, timer_calls=100
        )
    finally:
        meter.close()
    # one warm-up pair, then 5 rounds of 10 pairs; each pair reads the counter twice
    assert gpus[0].reads == 1 + 2 * (1 + 5 * 10)
    assert over.meter == "nvml" and over.sampler_hz == 0.0
    assert over.readings_per_step == pytest.approx(2 / 20)
    assert READ_S <= over.reading_s < READ_S + 0.01  # one reading, whatever the machine's load
    assert 0 < over.timers_s < 0.01
    assert over.meter_s == pytest.approx(over.reading_s * 0.1)
    assert over.fraction == pytest.approx((over.reading_s * 0.1 + over.timers_s) / 0.05)


def test_power_polling_adds_its_sampler_readings(gpus: list[FakeGpu]) -> None:
    gpus.append(FakeGpu(pynvml.NVML_DEVICE_ARCH_PASCAL))  # no energy counter: polled
    meter = NvmlMeter([0], poll_hz=50)
    try:
        over = measure_overhead(
            meter, step_s=0.2, steps_per_window=4, reading_calls=5, timer_calls=100
        )
    finally:
        meter.close()
    assert over.sampler_hz == 50
    assert over.readings_per_step == pytest.approx(2 / 4 + 50 * 0.2)
    assert over.reading_s >= READ_S  # each end of a window takes one power sample


def test_the_estimate_and_a_rank_that_reads_nothing() -> None:
    over = measure_overhead(
        EstimateMeter(), step_s=1.0, steps_per_window=1, reading_calls=20, timer_calls=100
    )
    assert over.meter == "estimate" and over.sampler_hz == 0.0
    assert 0 < over.reading_s < 0.01  # two /proc/stat reads per pair
    assert over.readings_per_step == 2.0  # a window of one step: the worst case
    null = measure_overhead(
        NullMeter(EstimateMeter), step_s=1.0, steps_per_window=5, reading_calls=20, timer_calls=10
    )
    assert null.meter == "estimate" and null.readings_per_step == pytest.approx(0.4)


def test_rapl_checkpoints_count_as_sampler_readings(tmp_path: Path) -> None:
    package = tmp_path / "intel-rapl:0"
    package.mkdir()
    (package / "name").write_text("package-0\n")
    (package / "energy_uj").write_text("1000\n")
    (package / "max_energy_range_uj").write_text("262143328850\n")
    meter = RaplMeter(tmp_path, poll_s=0.5)
    assert sampler_hz(meter) == 2.0
    over = measure_overhead(meter, step_s=0.1, steps_per_window=10, reading_calls=5)
    meter.close()
    assert over.meter == "rapl"
    assert over.readings_per_step == pytest.approx(0.2 + 2.0 * 0.1)


def test_the_timers_cost_little_on_cpu() -> None:
    seconds = timer_cost_s("cpu", calls=1000)
    assert 0 < seconds < 1e-3  # a handful of clock reads and two list look-ups


def test_the_arithmetic() -> None:
    over = Overhead("nvml", step_s=0.1, steps_per_window=10, reading_s=1e-4, sampler_hz=0.0,
                    timers_s=2e-6)  # fmt: skip
    assert over.readings_per_step == pytest.approx(0.2)
    assert over.per_step_s == pytest.approx(2e-5 + 2e-6)
    assert over.fraction == pytest.approx(2.2e-4)
    with pytest.raises(ValueError, match="steps_per_window"):
        readings_per_step(0.0, 0.1, 0)
    with pytest.raises(ValueError, match="step_s"):
        readings_per_step(0.0, 0.0, 1)
    with pytest.raises(ValueError):
        measure_overhead(EstimateMeter(), step_s=-1.0, steps_per_window=1)


@pytest.mark.cuda
def test_on_a_gpu_the_run_meter_and_synchronised_timers_are_cheap() -> None:
    """On a CUDA machine: the meter a cuda run selects, and the timers with a real
    ``torch.cuda.synchronize``; both far below a millisecond-scale step."""
    from greenbench.energy import select_meter

    meter = select_meter("cuda", None, gpu_indices=[0])
    try:
        over = measure_overhead(meter, step_s=0.1, steps_per_window=10, device="cuda")
    finally:
        meter.close()
    assert over.meter in ("nvml", "zeus")
    assert 0 < over.reading_s < 5e-3
    assert 0 < over.timers_s < 1e-3
    assert torch.cuda.is_available()
