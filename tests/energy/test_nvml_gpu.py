"""NVML on a real GPU (``pytest -m cuda``; skipped without one): the energy counter of a busy
window of matrix products lies above the GPU's idle power × time and below 1 kW × time.

Bounds, not figures: an H100 idles near 75 W and draws several hundred watts under bf16 GEMMs
(NVIDIA's datasheet and NVML readings of earlier runs); idle is measured here, floored at 30 W,
and no GPU on one board draws 1 kW."""

from __future__ import annotations

import time

import pytest
import torch

from greenbench.energy.nvml import NvmlMeter

pytestmark = pytest.mark.cuda

WINDOW_S = 2.0  # the counter advances every ~100 ms: two seconds resolve a window to ~5 %


def busy_matmuls(device: torch.device, seconds: float) -> None:
    """bf16 matrix products back to back for ``seconds`` (synchronised every few, so the
    clock follows the device)."""
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(8):
            a = (a @ b).clamp_(-1, 1)
        torch.cuda.synchronize(device)


def test_a_busy_gpu_spends_more_than_idle_and_less_than_a_kilowatt() -> None:
    device = torch.device("cuda", 0)
    busy_matmuls(device, 0.2)  # context, cuBLAS handles and clocks up before any window
    meter = NvmlMeter([0])
    try:
        assert meter.counter_devices == [0] or meter.polled_devices == [0]
        torch.cuda.synchronize(device)
        time.sleep(1.0)  # let the clocks settle after the warm-up
        meter.begin()
        time.sleep(WINDOW_S)
        idle = meter.end()
        torch.cuda.synchronize(device)
        meter.begin()
        busy_matmuls(device, WINDOW_S)
        torch.cuda.synchronize(device)
        busy = meter.end()
    finally:
        meter.close()
    assert idle.energy_j is not None and busy.energy_j is not None, (idle.note, busy.note)
    assert idle.source == busy.source == "nvml" and busy.measured
    idle_w = idle.energy_j / idle.seconds
    assert 10.0 < idle_w < 1000.0, f"idle power {idle_w:.0f} W"
    assert busy.seconds >= WINDOW_S
    floor_w = max(idle_w, 30.0)
    assert busy.energy_j > floor_w * busy.seconds, (
        f"busy {busy.energy_j:.0f} J in {busy.seconds:.2f} s is not above idle "
        f"{floor_w:.0f} W × time"
    )
    assert busy.energy_j < 1000.0 * busy.seconds
