"""The emulated NVML (greenbench.hardware.nvml_model): pynvml's calls, a driver's state kept in
a file across processes, the driver's refusals, and an energy counter that follows the model."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pynvml
import pytest

from greenbench.hardware.nvml_model import DRIVER_VERSION, EmulationError, emulated_nvml


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path))


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def test_it_answers_pynvml_calls_as_an_h100_would():
    nv = emulated_nvml("h100")
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetCount() == 8
    assert "H100" in nv.nvmlDeviceGetName(h) and "emulated" in nv.nvmlDeviceGetName(h).lower()
    assert nv.nvmlDeviceGetArchitecture(h) >= pynvml.NVML_DEVICE_ARCH_VOLTA
    assert nv.nvmlDeviceGetPowerManagementLimitConstraints(h) == (200_000, 700_000)
    assert nv.nvmlDeviceGetPowerManagementDefaultLimit(h) == 700_000
    assert nv.nvmlDeviceGetPowerManagementLimit(h) == 700_000
    assert nv.nvmlSystemGetDriverVersion() == DRIVER_VERSION
    assert nv.NVML_CLOCK_SM == pynvml.NVML_CLOCK_SM  # pynvml's constants
    assert nv.nvmlDeviceGetHandleByUUID(nv.nvmlDeviceGetUUID(h)) == h
    with pytest.raises(pynvml.NVMLError):
        nv.nvmlDeviceGetHandleByIndex(8)
    with pytest.raises(pynvml.NVMLError):  # the meter then falls back to GetPowerUsage
        nv.nvmlDeviceGetFieldValues(h, [])


def test_a_limit_outlives_the_process_that_set_it(tmp_path):
    nv = emulated_nvml("h100")
    nv.nvmlDeviceSetPowerManagementLimit(nv.nvmlDeviceGetHandleByIndex(1), 490_000)
    code = (
        "from greenbench.hardware.nvml_model import emulated_nvml; nv = emulated_nvml('h100'); "
        "print(nv.nvmlDeviceGetPowerManagementLimit(nv.nvmlDeviceGetHandleByIndex(1)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert out.stdout.strip() == "490000"
    assert nv.limits_w()[:2] == [700.0, 490.0]


def test_the_driver_refuses_what_a_real_one_refuses():
    nv = emulated_nvml("h100")
    h = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError) as out_of_range:
        nv.nvmlDeviceSetPowerManagementLimit(h, 150_000)
    assert out_of_range.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT
    nv.configure(grants_changes=False)
    assert not nv.grants_changes()
    with pytest.raises(pynvml.NVMLError) as refused:
        nv.nvmlDeviceSetPowerManagementLimit(h, 490_000)
    assert refused.value.value == pynvml.NVML_ERROR_NO_PERMISSION
    assert nv.nvmlDeviceGetPowerManagementLimit(h) == 700_000


def test_the_clock_falls_under_a_limit():
    nv = emulated_nvml("h100")
    h = nv.nvmlDeviceGetHandleByIndex(0)
    full = nv.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    assert full == nv.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
    nv.nvmlDeviceSetPowerManagementLimit(h, 385_000)
    assert nv.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) < 0.86 * full


def test_the_counter_draws_idle_power_while_the_reader_sleeps_and_more_while_it_works(
    monkeypatch,
):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nv = emulated_nvml("h100")
    h = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceSetPowerManagementLimit(h, 490_000)
    start = nv.nvmlDeviceGetTotalEnergyConsumption(h)
    time.sleep(0.3)
    idle_j = (nv.nvmlDeviceGetTotalEnergyConsumption(h) - start) / 1000
    assert idle_j == pytest.approx(75 * 0.3, rel=0.3)
    start = nv.nvmlDeviceGetTotalEnergyConsumption(h)
    busy(0.3)
    busy_j = (nv.nvmlDeviceGetTotalEnergyConsumption(h) - start) / 1000
    assert busy_j > 2 * idle_j  # up to the 490 W the limit allows
    assert nv.nvmlDeviceGetPowerUsage(h) <= 490_000


def test_an_unknown_gpu_type_is_named():
    with pytest.raises(EmulationError, match="h100"):
        emulated_nvml("h1000")


def test_a_driven_device_counts_energy_over_its_own_time_not_the_wall_clock(monkeypatch):
    """The rank drives its emulated GPU: only the device time it reports (the model's step
    times) draws energy, at the busy power the limit allows, however long the wall clock ran."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nv = emulated_nvml("h100")
    h = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceSetPowerManagementLimit(h, 490_000)
    nv.drive(0)
    start = nv.nvmlDeviceGetTotalEnergyConsumption(h)
    busy(0.2)  # wall time, CPU busy: no energy of its own
    time.sleep(0.2)
    nv.run(0, 2.0)
    assert nv.nvmlDeviceGetTotalEnergyConsumption(h) - start == pytest.approx(490 * 2.0 * 1000)
    assert nv.nvmlDeviceGetPowerUsage(h) == 490_000  # busy, capped at the limit
    nv.release(0)
    start = nv.nvmlDeviceGetTotalEnergyConsumption(h)
    time.sleep(0.3)  # released: the wall clock counts again, at idle power while asleep
    idle_j = (nv.nvmlDeviceGetTotalEnergyConsumption(h) - start) / 1000
    assert idle_j == pytest.approx(75 * 0.3, rel=0.3)


def test_a_base_step_outlives_the_process_that_stored_it():
    nv = emulated_nvml("h100")
    assert nv.base_step("cfg/rank0") is None
    nv.store_base_step("cfg/rank0", {"step_s": 0.25, "contended": False})
    code = (
        "from greenbench.hardware.nvml_model import emulated_nvml; "
        "print(emulated_nvml('h100').base_step('cfg/rank0')['step_s'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert out.stdout.strip() == "0.25"
    assert nv.limits_w() == [700.0] * 8  # the devices' state is untouched
