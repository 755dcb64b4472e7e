"""A meter of a power reading polled over the window and integrated: what a BMC offers (it
reports watts, not energy). The node meters (`greenbench.energy.ipmi`, `greenbench.energy.redfish`)
are this with a reading function each.

The readings are integrated by the trapezoid rule, the first and last held out to the window's
ends. A reading that fails (no answer, an error, a value the BMC marks invalid) makes the whole
window's energy None with the reason in its note: unavailable, never a silent zero, and never a
partial sum passed off as the whole.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from greenbench.energy.base import EnergyWindow, Meter, PowerSample, Probe
from greenbench.energy.nvml import trapezoid_j

#: where the kernel's IPMI driver puts its device (ipmitool's open interface tries these)
IPMI_DEVICES = ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0")


class NodeMeterError(RuntimeError):
    """A node meter reading failed; the message says why (it becomes the window's note)."""


def _describe(e: BaseException) -> str:
    return str(e) if isinstance(e, NodeMeterError) else f"{type(e).__name__}: {e}"


class PolledPowerMeter(Meter):
    """Energy of one power reading polled every ``poll_s`` seconds (module docstring)."""

    source: ClassVar[str] = "node"
    measured: ClassVar[bool] = True
    min_window_s: ClassVar[float] = 0.0
    component: ClassVar[str] = "node"

    def __init__(self, read_w: Callable[[], float], *, poll_s: float = 1.0) -> None:
        self._read_w = read_w
        self.poll_s = poll_s
        self._points: list[tuple[float, float]] = []
        self._errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None

    @classmethod
    def probe(cls) -> Probe:
        return Probe(cls.source, False, "a polled meter needs something to read")

    def _reading(self) -> None:
        assert self._t0 is not None
        try:
            watts = float(self._read_w())
        except Exception as e:
            with self._lock:
                self._errors.append(_describe(e))
            return
        with self._lock:
            self._points.append((time.perf_counter() - self._t0, watts))

    def _poll(self) -> None:
        self._reading()
        while not self._stop.wait(self.poll_s):
            self._reading()

    def begin(self) -> None:
        self._stop_thread()
        self._points, self._errors = [], []
        self._t0 = time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="greenbench-node", daemon=True)
        self._thread.start()

    def _stop_thread(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def end(self) -> EnergyWindow:
        if self._t0 is None:
            raise RuntimeError(f"{type(self).__name__}.end() called without begin()")
        seconds = time.perf_counter() - self._t0
        self._stop_thread()
        self._t0 = None
        points, errors = list(self._points), list(self._errors)
        # a reading still in flight when the window closed belongs to no part of it
        points = [pt for pt in points if pt[0] <= seconds] or points[:1]
        if errors or not points:
            why = errors[0] if errors else "no reading arrived during the window"
            more = f" (and {len(errors) - 1} more failed reading(s))" if len(errors) > 1 else ""
            return EnergyWindow(self.source, True, seconds, None, note=f"unavailable: {why}{more}")
        energy = points[0][1] * points[0][0] + points[-1][1] * max(seconds - points[-1][0], 0)
        energy += trapezoid_j(points)
        return EnergyWindow(
            source=self.source,
            measured=True,
            seconds=seconds,
            energy_j=energy,
            samples=tuple(PowerSample(t, w, self.component) for t, w in points),
            note=f"{len(points)} reading(s) of node power polled every {self.poll_s:g} s",
        )

    def close(self) -> None:
        self._stop_thread()


def ipmi_device() -> str | None:
    """The kernel's IPMI device if one exists."""
    return next((d for d in IPMI_DEVICES if Path(d).exists()), None)
