"""Energy meters: one file per source, registered by the name ``--energy-source`` takes in
:mod:`greenbench.energy.sources` (``ENERGY_SOURCES``).

Selection (which source a run uses, and the rank that reads the node's CPU) lives in
:mod:`greenbench.energy.select`; carbon intensity in :mod:`greenbench.energy.carbon`.
"""

from __future__ import annotations

from greenbench.energy.base import EnergyWindow, Meter, PowerSample, Probe
from greenbench.energy.select import select_meter
from greenbench.energy.sources import ENERGY_SOURCES, SOURCE_CHOICES, SOURCE_NAMES

__all__ = [
    "ENERGY_SOURCES",
    "SOURCE_CHOICES",
    "SOURCE_NAMES",
    "EnergyWindow",
    "Meter",
    "PowerSample",
    "Probe",
    "select_meter",
]
