"""An emulated GPU's time (greenbench.rank.emulated_gpu.EmulatedDevice): the model applied to
one base step, the fastest real step measured at the default limit and kept with how busy the
machine was, so that what the CPU does meanwhile cannot bend a power-limit sweep; and its energy,
the model's busy power over those times, read through the ordinary NVML meter."""

from __future__ import annotations

import pytest

from greenbench.hardware.gpu_model import MAX_SM_CLOCK_MHZ
from greenbench.hardware.nvml_model import emulated_nvml
from greenbench.rank import emulated_gpu
from greenbench.rank.emulated_gpu import EmulatedDevice, base_key, split
from greenbench.settings.runspec import RunSpec

BASE = {"emulate.gpu": "h100", "model.family": "transformer", "model.size": "tiny", "seed": 0,
        "data.seq_len": 64, "gpu.power_limit_frac": 0.0}  # fmt: skip


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path))


class Quiet:
    def others_busy_cores(self) -> float:
        return 0.02


class Busy:
    def others_busy_cores(self) -> float:
        return 1.95


def at(limit_w: float) -> dict:
    """A run's settings at ``limit_w``, with its device held there (as the launcher holds it)."""
    nv = emulated_nvml("h100")
    nv.nvmlDeviceSetPowerManagementLimit(nv.nvmlDeviceGetHandleByIndex(0), round(limit_w * 1000))
    return {**BASE, "gpu.power_limit_w": limit_w}


def clock_ratio(limit_w: float) -> float:
    nv = emulated_nvml("h100")
    h = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceSetPowerManagementLimit(h, round(limit_w * 1000))
    return MAX_SM_CLOCK_MHZ / nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)


def test_the_default_limit_measures_the_base_and_every_limit_applies_the_model_to_it(monkeypatch):
    monkeypatch.setattr(emulated_gpu, "LoadWatch", Busy)
    ratio = clock_ratio(385)
    full = EmulatedDevice(RunSpec("power-limit", at(700)), 0, 0)
    assert full.measures and full.slowdown == 1.0
    full.observe(0.30, 1e9)  # a settled warm-up step
    assert full.settle([0.25, 0.20, 0.40], [0.0] * 3, [1e9] * 3) == [0.20] * 3  # the fastest
    assert full.settle([0.9, 0.9], [0.0] * 2, [1e9] * 2) == [0.20] * 2  # later: the same base
    full.close()
    assert "others kept" not in full.note() and "1.95 of" in full.note()  # its load, said

    # a lower limit later, the CPU far faster or far slower meanwhile: the model's multiple
    for real in (0.01, 5.0):
        capped = EmulatedDevice(RunSpec("power-limit", at(385)), 0, 0)
        assert not capped.measures
        times = capped.settle([real, real], [0.0, 0.0], [1e9, 1e9])
        assert times == pytest.approx([0.20 * ratio] * 2, rel=1e-12)
        assert "the base step 0.2 s" in capped.note() and "default limit" in capped.note()
        capped.close()


def test_its_energy_is_the_busy_power_under_the_limit_over_the_model_s_time(monkeypatch):
    monkeypatch.setattr(emulated_gpu, "LoadWatch", Quiet)
    full = EmulatedDevice(RunSpec("power-limit", at(700)), 0, 0)
    full.settle([0.1], [0.0], [1e9])
    full.close()
    capped = EmulatedDevice(RunSpec("power-limit", at(490)), 0, 0)
    meter = capped.meter(sample_power=True)
    meter.begin()
    times = capped.settle([0.5] * 3, [0.0] * 3, [1e9] * 3)  # real steps: slower, no matter
    window = meter.end()
    meter.close()
    capped.close()
    assert window.energy_j == pytest.approx(490 * sum(times), abs=2e-3)  # a counter in mJ
    assert max(s.power_w for s in window.samples) == pytest.approx(490)
    assert "on a quiet machine" in capped.note()


def test_a_limit_run_with_no_base_stored_measures_its_own_and_a_debug_slowdown_is_device_work(
    monkeypatch,
):
    monkeypatch.setattr(emulated_gpu, "LoadWatch", Quiet)
    ratio = clock_ratio(490)
    capped = EmulatedDevice(RunSpec("power-limit", at(490)), 0, 0)
    assert capped.measures  # nothing measured at the default limit yet
    times = capped.settle([0.3, 0.1], [0.0, 0.05], [0.0, 0.0])  # FLOPs unknown: per step
    assert times == pytest.approx([0.1 * ratio, 0.15 * ratio])
    capped.close()
    again = EmulatedDevice(RunSpec("power-limit", at(385)), 0, 0)
    assert not again.measures and again.base["step_s"] == 0.1 and not again.base["at_default"]
    again.close()


def test_steps_of_other_lengths_take_their_flops_share_of_the_base_rate(monkeypatch):
    monkeypatch.setattr(emulated_gpu, "LoadWatch", Quiet)
    ratio = clock_ratio(385)
    full = EmulatedDevice(RunSpec("data-parallel", at(700)), 0, 0)
    # the fastest rate: 0.1 s for 1e9 FLOPs (the 2e9-FLOP step ran at half of it)
    assert full.settle([0.1, 0.4], [0.0, 0.0], [1e9, 2e9]) == pytest.approx([0.1, 0.2])
    full.close()
    capped = EmulatedDevice(RunSpec("data-parallel", at(385)), 0, 0)
    assert capped.settle([1.0, 1.0], [0.0, 0.0], [3e9, 5e8]) == pytest.approx(
        [0.3 * ratio, 0.05 * ratio]
    )
    assert "1e+10 FLOP/s, each step by its FLOPs" in capped.note()
    capped.close()


def test_the_base_belongs_to_one_configuration_and_rank_whatever_its_limit():
    full = RunSpec("power-limit", at(700))
    assert base_key(full, 0) == base_key(RunSpec("power-limit", at(385)), 0)
    assert base_key(full, 0) != base_key(full, 1)
    assert base_key(full, 0) != base_key(
        RunSpec("power-limit", {**at(700), "model.size": "small"}), 0
    )


def test_communication_and_waiting_keep_their_real_shares_of_the_model_s_time():
    assert split(2.0, 0.5, 0.5, 4.0) == (2.0, 1.0, 1.0)
    assert split(0.0, 0.0, 0.0, 4.0) == (4.0, 0.0, 0.0)
