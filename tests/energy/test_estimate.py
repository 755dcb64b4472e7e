"""EstimateMeter (TDP × load model) and the CodeCarbon figures it rests on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from greenbench.energy.estimate import EstimateMeter, cpu_power_w
from greenbench.energy.host_power import (
    CpuTdp,
    cpu_power_table,
    host_cpu_tdp,
    match_cpu,
    ram_power_w,
)

TDP_100 = CpuTdp(100.0, "test cpu", "given")


def scripted(*readings: tuple[float, float]) -> Callable[[], tuple[float, float]]:
    it: Iterator[tuple[float, float]] = iter(readings)
    return lambda: next(it)


def test_estimate_on_this_machine() -> None:
    meter = EstimateMeter()
    meter.begin()
    sum(i * i for i in range(200_000))
    w = meter.end()
    assert w.source == "estimate" and w.measured is False
    assert w.energy_j is not None and w.energy_j > 0
    assert w.energy_cpu_j is not None and w.energy_cpu_j > 0
    assert f"TDP {meter.tdp.tdp_w:g} W" in w.note and "estimate" in w.note
    assert EstimateMeter.probe().available


def test_codecarbon_load_model() -> None:
    assert cpu_power_w(100.0, 0.0) == pytest.approx(10.0)  # floor: 10 % of TDP
    assert cpu_power_w(100.0, 0.5) == pytest.approx(21.25)  # 0.1 + 0.9 × 0.125
    assert cpu_power_w(100.0, 1.0) == pytest.approx(100.0)
    assert cpu_power_w(100.0, 1.7) == pytest.approx(100.0)  # clamped


def test_window_uses_machine_load_between_begin_and_end() -> None:
    # 30 busy seconds out of 40 CPU-seconds: load 0.75
    meter = EstimateMeter(tdp=TDP_100, include_dram=False, cpu_times=scripted((10, 100), (40, 140)))
    meter.begin()
    w = meter.end()
    power_w = 100.0 * (0.1 + 0.9 * 0.75**3)  # 47.96875 W
    assert w.energy_cpu_j == pytest.approx(power_w * w.seconds)
    assert w.energy_j == w.energy_cpu_j and w.energy_dram_j is None
    assert "load 75.0%" in w.note


def test_dram_estimate_is_added_and_labelled() -> None:
    meter = EstimateMeter(
        tdp=TDP_100, memory_bytes=24 * 1024**3, cpu_times=scripted((0, 0), (0, 10))
    )
    assert meter.ram_power_w == 20.0  # 24 GiB → 4 DIMMs × 5 W
    meter.begin()
    w = meter.end()
    assert w.energy_dram_j == pytest.approx(20.0 * w.seconds)
    assert w.energy_j == pytest.approx(30.0 * w.seconds)  # 10 W idle CPU + 20 W DRAM
    assert "CodeCarbon RAM model" in w.note


def test_idle_power_is_the_model_at_idle_load() -> None:
    meter = EstimateMeter(tdp=TDP_100, include_dram=False, cpu_times=scripted((5, 50), (6, 70)))
    assert meter.idle_power_w(0.01) == pytest.approx(100.0 * (0.1 + 0.9 * 0.05**3))


def test_sub_tick_window_is_flagged() -> None:
    meter = EstimateMeter(tdp=TDP_100, include_dram=False, cpu_times=scripted((5, 50), (5, 50)))
    meter.begin()
    assert "shorter than /proc/stat resolution" in meter.end().note


def test_tdp_table_matching_follows_codecarbon() -> None:
    names = list(cpu_power_table())
    assert len(names) > 4000
    assert match_cpu("Intel(R) Core(TM) i7-8550U CPU @ 1.80GHz", names) == "Intel Core i7-8550U"
    assert match_cpu("AMD EPYC 7763 64-Core Processor", names) == "AMD EPYC 7763"
    assert match_cpu("Intel(R) Xeon(R) Processor", names) is None  # ambiguous: many Xeons


def _cpuinfo(tmp_path: Path, model: str | None, sockets: int) -> str:
    lines = []
    for s in range(sockets):
        for _ in range(2):
            if model:
                lines.append(f"model name\t: {model}")
            lines.append(f"physical id\t: {s}\n")
    path = tmp_path / "cpuinfo"
    path.write_text("\n".join(lines))
    return str(path)


def test_host_tdp_from_table_times_sockets(tmp_path: Path) -> None:
    tdp = host_cpu_tdp(_cpuinfo(tmp_path, "AMD EPYC 7763 64-Core Processor", 2))
    assert tdp.tdp_w == 560.0
    assert "cpu_power.csv" in tdp.source and "2 socket" in tdp.source


def test_host_tdp_fallbacks(tmp_path: Path) -> None:
    unknown = host_cpu_tdp(_cpuinfo(tmp_path, "Mystery CPU 9000", 1), logical_cpus=6)
    assert unknown.tdp_w == 24.0 and "4 W/thread × 6 threads" in unknown.source
    none = host_cpu_tdp(str(tmp_path / "no-such-file"))
    assert none.tdp_w == 85.0 and "85 W" in none.source


def test_ram_power_model_matches_codecarbon() -> None:
    # values of codecarbon 3.3 RAM._calculate_ram_power
    expected = {8: 10.0, 24: 20.0, 100: 38.0, 200: 58.0, 4096: 126.0}
    assert {gb: ram_power_w(gb) for gb in expected} == expected
    assert ram_power_w(8, arm=True) == 3.0
