"""The meter of a rank that owns no component, so that rank windows add up without double counting.

Each GPU is read by the rank that owns it; the CPU and DRAM of a node are read once, by local
rank 0 (no double counting across ranks). The other ranks of a node get a
:class:`NullMeter`: it owns no component, so its window says ``energy_j=0.0`` — a true zero, not
a failed read — with a note naming who reads the energy, and carries the same ``source`` and
``measured`` as rank 0's meter so that a run never looks like a mix of sources. Component fields
stay None ("owns none of it").

Summing ranks is then plain addition (``greenbench.aggregate`` does it): ``energy_j`` is the sum,
unknown (None) if any rank failed to read; each component is the sum of the ranks that report it.
"""

from __future__ import annotations

import time
from typing import ClassVar

from greenbench.energy.base import EnergyWindow, Meter, Probe


class NullMeter(Meter):
    """The meter of a rank whose energy another rank reads (non-zero local rank on CPU)."""

    source: ClassVar[str] = "none"  # windows carry the mirrored meter's source instead
    measured: ClassVar[bool] = True
    min_window_s: ClassVar[float] = 0.0

    def __init__(self, mirrors: type[Meter], note: str = "CPU/DRAM energy read by local rank 0"):
        self.mirrors = mirrors
        self.note = note
        self._t0: float | None = None

    @classmethod
    def probe(cls) -> Probe:
        return Probe(cls.source, True, "reads nothing: stands in for ranks that own no component")

    def begin(self) -> None:
        self._t0 = time.perf_counter()

    def end(self) -> EnergyWindow:
        if self._t0 is None:
            raise RuntimeError("NullMeter.end() called without begin()")
        seconds, self._t0 = time.perf_counter() - self._t0, None
        return EnergyWindow(
            source=self.mirrors.source,
            measured=self.mirrors.measured,
            seconds=seconds,
            energy_j=0.0,
            note=self.note,
        )

    def idle_power_w(self, seconds: float = 1.0) -> float | None:
        """Zero: this rank owns nothing, so it adds nothing to the node's idle power."""
        return 0.0
