"""What an energy source is to greenbench: a name a run can give (``energy.source``,
``--energy-source``), the `Meter` class that reads it, a one-line doc and how a rank makes its
meter from a `MeterRequest`. The registry of sources is `greenbench.energy.sources`.

A source that reads the whole node (the CPU's counters, a load model) is read once per node:
`node_meter` gives local rank 0 the real meter and every other rank a `NullMeter` of the same
source, so summing ranks counts the node once. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from greenbench.energy.base import Meter, Probe
from greenbench.energy.ranks import NullMeter

ProbeFn = Callable[[str], Probe]
#: what kind of figure a source gives: a counter's reading, or a model's estimate
FigureKind = Literal["measured", "estimate"]


@dataclass(frozen=True, slots=True)
class MeterRequest:
    """What a rank asks of a source: its device kind ("cpu" or "cuda"), the probe to consult
    (by source name: `greenbench.energy.select` caches each source's), the CUDA devices it owns,
    its local rank, and whether NVML should also sample power."""

    device: str
    probe: ProbeFn
    gpu_indices: Sequence[int] = ()
    local_rank: int = 0
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


def node_meter(cls: type[Meter], make: Callable[[], Meter], local_rank: int) -> Meter:
    """The node's meter on local rank 0; a NullMeter of the same source elsewhere."""
    return make() if local_rank == 0 else NullMeter(cls)
