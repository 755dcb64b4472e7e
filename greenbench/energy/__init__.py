"""Energy meters: one file per source, registered here by the name ``--energy-source`` takes.

Selection (which source a run uses, and the rank that reads the node's CPU) lives in
:mod:`greenbench.energy.select`; carbon intensity in :mod:`greenbench.energy.carbon`.
"""

from __future__ import annotations

from greenbench.energy.base import EnergyWindow, Meter, PowerSample, Probe
from greenbench.energy.estimate import EstimateMeter
from greenbench.energy.nvml import NvmlMeter
from greenbench.energy.rapl import RaplMeter
from greenbench.energy.zeus import ZeusMeter

METERS: dict[str, type[Meter]] = {
    "nvml": NvmlMeter,
    "zeus": ZeusMeter,
    "rapl": RaplMeter,
    "estimate": EstimateMeter,
}

# after METERS: select reads the registry
from greenbench.energy.select import select_meter  # noqa: E402

__all__ = ["METERS", "EnergyWindow", "Meter", "PowerSample", "Probe", "select_meter"]
