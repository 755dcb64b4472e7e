"""The energy sources a run can name (``--energy-source``), each registered once here.

`ENERGY_SOURCES` maps a name to its `EnergySource` (`greenbench.energy.source`): the meter class
that reads it (whose ``probe`` says whether it works here and whose ``measured`` says whether its
figure is a reading of a counter or an estimate), a one-line description, and how to make this
rank's meter. Meter selection (`greenbench.energy.select`), the CLI's choices, the settings'
choices and `greenbench list energy-sources` all read this registry. The built-in sources are
declared here; a new one is its own module (its `Meter` and its `EnergySource`) and one import
and one entry here. Nothing here imports torch.

CPU-side sources (rapl, zeus on a CPU run, estimate) read the whole node, so only local rank 0
gets the real meter; other ranks get a `NullMeter` (energy 0.0, same source label), and summing
ranks gives the node total once.
"""

from __future__ import annotations

from greenbench.energy.base import Meter, Probe
from greenbench.energy.estimate import EstimateMeter
from greenbench.energy.nvml import NvmlMeter
from greenbench.energy.rapl import RaplMeter
from greenbench.energy.source import EnergySource, MeterRequest, ProbeFn, node_meter
from greenbench.energy.zeus import ZeusMeter
from greenbench.errors import MeterUnavailable

__all__ = [
    "ENERGY_SOURCES",
    "MEASURED_SOURCES",
    "SOURCE_CHOICES",
    "SOURCE_NAMES",
    "EnergySource",
    "MeterRequest",
    "ProbeFn",
    "zeus_count",
]


def zeus_count(p: Probe, kind: str) -> int:
    """How many GPUs or CPU packages (``kind``: "gpus", "cpus") a zeus probe found."""
    return int(p.details.get(kind, 0)) if p.available else 0


def _make_nvml(r: MeterRequest) -> Meter:
    if r.device != "cuda" or not r.gpu_indices:
        raise MeterUnavailable(
            "nvml measures GPUs, and this rank owns none (cpu run): use rapl, zeus or estimate"
        )
    return NvmlMeter(list(r.gpu_indices), sample_power=r.sample_power)


def _make_zeus(r: MeterRequest) -> Meter:
    if r.device == "cuda":
        if not r.gpu_indices:
            raise MeterUnavailable("zeus on a cuda run needs the GPU indices this rank owns")
        return ZeusMeter(gpu_indices=list(r.gpu_indices), cpu_indices=[])
    n_cpus = zeus_count(r.probe("zeus"), "cpus")
    if not n_cpus:
        raise MeterUnavailable(f"zeus finds no CPU RAPL package: {r.probe('zeus').reason}")
    return node_meter(
        ZeusMeter, lambda: ZeusMeter(gpu_indices=[], cpu_indices=list(range(n_cpus))), r.local_rank
    )


def _make_rapl(r: MeterRequest) -> Meter:
    return node_meter(RaplMeter, RaplMeter, r.local_rank)


def _make_estimate(r: MeterRequest) -> Meter:
    return node_meter(EstimateMeter, EstimateMeter, r.local_rank)


#: every energy source a run can name, best first
ENERGY_SOURCES: dict[str, EnergySource] = {
    s.name: s
    for s in (
        EnergySource("nvml", NvmlMeter, "the GPUs' energy counters (else power polled), "
                     "through NVML", _make_nvml),
        EnergySource("zeus", ZeusMeter, "Zeus's GPU and CPU (RAPL) readings, RAPL also through "
                     "zeusd or a container mount", _make_zeus),
        EnergySource("rapl", RaplMeter, "CPU package and DRAM energy counters of every socket "
                     "(Linux powercap)", _make_rapl),
        EnergySource("estimate", EstimateMeter, "TDP × machine load, as CodeCarbon models CPUs "
                     "without counters: an estimate, not a measurement", _make_estimate),
    )
}  # fmt: skip
#: the names a run can force (``--energy-source``), best first
SOURCE_NAMES: tuple[str, ...] = tuple(ENERGY_SOURCES)
#: what ``--energy-source`` and the ``energy.source`` setting accept: automatic, or a name
SOURCE_CHOICES: tuple[str, ...] = ("auto", *SOURCE_NAMES)
#: the sources that read a hardware counter
MEASURED_SOURCES: tuple[str, ...] = tuple(n for n, s in ENERGY_SOURCES.items() if s.measured)
