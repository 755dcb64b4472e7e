"""The one interface every energy source implements, and the reading it returns.

A meter measures one *window*: ``begin()`` … work … ``end()``. The caller synchronises the
device before both calls (device work is asynchronous); the meter never touches models or torch.
Units are in the field names: joules, watts, seconds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class PowerSample:
    """One power reading: seconds since the window began, watts, and which component."""

    t_s: float
    power_w: float
    component: str  # "gpu0", "cpu0", "dram0", "total", …


@dataclass(frozen=True, slots=True)
class EnergyWindow:
    """What a meter read over one window.

    ``energy_j`` is the gross energy of every component this meter owns, in joules, or None
    when the window could not be read (never a silent zero). Component fields are None where
    the source does not separate them.
    """

    source: str  # "nvml" | "zeus" | "rapl" | "estimate"
    measured: bool  # False for "estimate": a model, not a counter
    seconds: float
    energy_j: float | None
    energy_gpu_j: float | None = None
    energy_cpu_j: float | None = None
    energy_dram_j: float | None = None
    samples: tuple[PowerSample, ...] = ()
    note: str = ""  # e.g. "window 0.4 s shorter than counter resolution", "read error: …"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples"] = [asdict(s) for s in self.samples]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EnergyWindow:
        d = dict(d)
        d["samples"] = tuple(PowerSample(**s) for s in d.get("samples", ()))
        return cls(**d)


@dataclass(frozen=True, slots=True)
class Probe:
    """Whether a source works on this machine, and why not when it does not."""

    source: str
    available: bool
    reason: str  # human sentence: what was found, or what is missing and how to fix it
    details: dict[str, Any] = field(default_factory=dict)


class Meter(ABC):
    """An energy source. Subclasses register in ``greenbench.energy.sources.ENERGY_SOURCES``."""

    source: ClassVar[str]
    measured: ClassVar[bool] = True
    #: the smallest window the source resolves; shorter windows are flagged by the worker
    min_window_s: ClassVar[float] = 0.0

    @classmethod
    @abstractmethod
    def probe(cls) -> Probe:
        """Check, without side effects, whether this source can be read here."""

    @abstractmethod
    def begin(self) -> None:
        """Start a window (the caller has synchronised the device)."""

    @abstractmethod
    def end(self) -> EnergyWindow:
        """Close the window and return its reading."""

    def idle_power_w(self, seconds: float = 1.0) -> float | None:
        """Sample idle power for ``seconds`` (nothing else running); None if unknown."""
        self.begin()
        import time

        time.sleep(seconds)
        w = self.end()
        if w.energy_j is None or w.seconds <= 0:
            return None
        return w.energy_j / w.seconds

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release handles (threads, NVML)."""
