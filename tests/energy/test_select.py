"""Meter selection, forced sources, rank sharing and the doctor's explanations."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from greenbench.energy import ENERGY_SOURCES, SOURCE_CHOICES
from greenbench.energy.base import Probe
from greenbench.energy.estimate import EstimateMeter
from greenbench.energy.ranks import NullMeter
from greenbench.energy.select import (
    auto_source,
    describe_cuda,
    doctor_report,
    explain_choices,
    select_meter,
)
from greenbench.errors import MeterUnavailable, SpecError


def probes(**available: bool | dict[str, int]) -> Callable[[str], Probe]:
    """A probe function: ``rapl=True``, ``zeus={"cpus": 2}``; anything unnamed is unavailable."""

    def probe(name: str) -> Probe:
        a = available.get(name, name == "estimate")
        details = a if isinstance(a, dict) else {}
        return Probe(name, bool(a), f"{name} {'ok' if a else 'missing (fake reason)'}", details)

    return probe


def test_registry() -> None:
    assert set(ENERGY_SOURCES) == {"nvml", "zeus", "rapl", "estimate"}
    assert all(s.meter.source == k and s.name == k for k, s in ENERGY_SOURCES.items())
    assert SOURCE_CHOICES == ("auto", "nvml", "zeus", "rapl", "estimate")  # best first
    assert {k: s.figure for k, s in ENERGY_SOURCES.items()} == {
        "nvml": "measured", "zeus": "measured", "rapl": "measured", "estimate": "estimate"
    }  # fmt: skip


def test_forced_unavailable_source_raises_one_line() -> None:
    with pytest.raises(MeterUnavailable) as err:
        select_meter("cpu", "rapl", probe=probes())
    msg = str(err.value)
    assert "--energy-source rapl" in msg and "rapl missing (fake reason)" in msg
    assert "\n" not in msg


def test_forced_nvml_on_cpu_run_fails_on_any_machine() -> None:
    with pytest.raises(MeterUnavailable, match="nvml"):
        select_meter("cpu", "nvml")


def test_unknown_source_and_device() -> None:
    with pytest.raises(SpecError, match="choose one of nvml, zeus, rapl, estimate"):
        select_meter("cpu", "wattmeter", probe=probes())
    with pytest.raises(SpecError, match="unknown device"):
        select_meter("tpu", None, probe=probes())


def test_auto_order_on_cpu() -> None:
    assert auto_source("cpu", probes(rapl=True, zeus={"cpus": 2}))[0] == "rapl"
    assert auto_source("cpu", probes(zeus={"cpus": 2}))[0] == "zeus"
    assert auto_source("cpu", probes(zeus={"gpus": 1}))[0] == "estimate"  # zeus without RAPL
    name, why = auto_source("cpu", probes())
    assert name == "estimate" and "not a measurement" in why and "rapl missing" in why


def test_auto_order_on_cuda() -> None:
    assert auto_source("cuda:1", probes(nvml=True, zeus={"gpus": 1}))[0] == "nvml"
    assert auto_source("cuda", probes(zeus={"gpus": 1}))[0] == "zeus"
    name, why = auto_source("cuda", probes(zeus={"cpus": 1}))
    assert name is None and "no GPU energy source" in why
    with pytest.raises(MeterUnavailable, match="no GPU energy source"):
        select_meter("cuda", None, gpu_indices=[0], probe=probes())


def test_cpu_estimate_read_by_local_rank_zero_only() -> None:
    rank0 = select_meter("cpu", None, local_rank=0, probe=probes())
    rank1 = select_meter("cpu", None, local_rank=1, probe=probes())
    assert isinstance(rank0, EstimateMeter)
    assert isinstance(rank1, NullMeter)
    rank1.begin()
    w = rank1.end()
    assert (w.source, w.measured, w.energy_j) == ("estimate", False, 0.0)
    assert "local rank 0" in w.note
    assert rank1.idle_power_w() == 0.0


def test_rapl_on_other_ranks_needs_no_counter() -> None:
    meter = select_meter("cpu", "rapl", local_rank=3, probe=probes(rapl=True))
    assert isinstance(meter, NullMeter)
    meter.begin()
    assert meter.end().source == "rapl"


def test_doctor_report_on_this_machine() -> None:
    report = doctor_report()
    assert [p.source for p in report] == ["nvml", "zeus", "rapl", "estimate"]
    assert report[-1].available  # the estimate always is
    assert all(p.reason for p in report)


def test_explain_choices() -> None:
    ps = [Probe("nvml", True, "1 GPU"), Probe("rapl", False, "no powercap tree"),
          Probe("zeus", False, "nothing"), Probe("estimate", True, "TDP 8 W")]  # fmt: skip
    none = explain_choices(ps, [])
    assert none["cpu"].startswith("cpu run: estimate") and "no powercap tree" in none["cpu"]
    assert "impossible" in none["cuda"]
    assert explain_choices(ps, ["NVIDIA H100"])["cuda"].startswith("cuda run: nvml")


def test_describe_cuda() -> None:
    assert "no CUDA device" in describe_cuda([])
    assert describe_cuda(["A", "B"]) == "2 CUDA device(s): 0 A, 1 B"
