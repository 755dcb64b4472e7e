"""The energy sources a run can name (``--energy-source``), each spelled once here.

`ENERGY_SOURCES` maps a name to its `EnergySource`: the meter class that reads it (whose
``probe`` says whether it works here and whose ``measured`` says whether its figure is a reading
of a counter or an estimate), a one-line description, and how to make this rank's meter. Meter
selection (`greenbench.energy.select`), the CLI's choices, the settings' choices and
`greenbench list energy-sources` all read this registry; adding a source is its meter module and
one entry here. Nothing here imports torch.

CPU-side sources (rapl, zeus on a CPU run, estimate) read the whole node, so only local rank 0
gets the real meter; other ranks get a `NullMeter` (energy 0.0, same source label), and summing
ranks gives the node total once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from greenbench.energy.base import Meter, Probe
from greenbench.energy.estimate import EstimateMeter
from greenbench.energy.nvml import NvmlMeter
from greenbench.energy.ranks import NullMeter
from greenbench.energy.rapl import RaplMeter
from greenbench.energy.zeus import ZeusMeter
from greenbench.errors import MeterUnavailable

ProbeFn = Callable[[str], Probe]
#: what kind of figure a source gives: a counter's reading, or a model's estimate
FigureKind = Literal["measured", "estimate"]


@dataclass(frozen=True, slots=True)
class MeterRequest:
    """What a rank asks of a source: its device kind ("cpu" or "cuda"), the CUDA devices it
    owns, its local rank, the probe to consult, and whether NVML should also sample power."""

    device: str
    gpu_indices: Sequence[int] = ()
    local_rank: int = 0
    probe: ProbeFn = lambda name: _probe_here(name)
    sample_power: bool = False


@dataclass(frozen=True, slots=True)
class EnergySource:
    """One energy source: its name, meter class, one-line doc and how to make a rank's meter."""

    name: str
    meter: type[Meter]
    doc: str
    make: Callable[[MeterRequest], Meter]

    @property
    def measured(self) -> bool:
        """Whether the source reads a counter (else its figure is an estimate)."""
        return bool(self.meter.measured)

    @property
    def figure(self) -> FigureKind:
        """``"measured"`` or ``"estimate"``."""
        return "measured" if self.measured else "estimate"

    def probe(self) -> Probe:
        """Whether the source can be read on this machine, and why not when it cannot."""
        return self.meter.probe()


def _probe_here(name: str) -> Probe:
    """Source ``name``'s probe on this machine."""
    return ENERGY_SOURCES[name].probe()


def zeus_count(p: Probe, kind: str) -> int:
    """How many GPUs or CPU packages (``kind``: "gpus", "cpus") a zeus probe found."""
    return int(p.details.get(kind, 0)) if p.available else 0


def _node_meter(cls: type[Meter], make: Callable[[], Meter], local_rank: int) -> Meter:
    """The node's meter on local rank 0; a NullMeter of the same source elsewhere."""
    return make() if local_rank == 0 else NullMeter(cls)


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
    return _node_meter(
        ZeusMeter, lambda: ZeusMeter(gpu_indices=[], cpu_indices=list(range(n_cpus))), r.local_rank
    )


def _make_rapl(r: MeterRequest) -> Meter:
    return _node_meter(RaplMeter, RaplMeter, r.local_rank)


def _make_estimate(r: MeterRequest) -> Meter:
    return _node_meter(EstimateMeter, EstimateMeter, r.local_rank)


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
