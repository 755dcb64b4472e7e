"""What the configuration running now is doing, for the progress display of `greenbench run`.

Two sources, the newer wins:

* the launcher's own phases, told as it enters them (`RunPhases.tell`): calibrating the CPU
  peak, the idle baseline, starting the ranks, re-measuring the peak after a run beat it,
  simulating;
* the ranks' phases, which rank 0 writes to the run's working folder (`greenbench.rank.phase`:
  building the model, warm-up, repeat i/n, evaluation, checkpoint, gathering the results),
  read from the folder the launcher is watching (`RunPhases.watch`) when the display asks
  (`RunPhases.current`, polled by the display's own thread: a rank never waits for it).

The launcher's thread tells and watches, the display's thread reads; a lock keeps the two
consistent. `NO_PHASES` is the sink of a run nobody displays.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Protocol

from greenbench.rank.phase import describe, read_phase


class Phases(Protocol):
    """Where a runner tells what it is doing (`greenbench.launcher.runners.base.RunContext`)."""

    def tell(self, phase: str | None) -> None:
        """The launcher is now in ``phase`` (None: between configurations)."""
        ...

    def watch(self, folder: Path | None) -> None:
        """The ranks of the configuration write their phases to ``folder`` (None: no more)."""
        ...


class NoPhases:
    """A sink that keeps nothing: nobody displays this run's phases."""

    def tell(self, phase: str | None) -> None:
        return None

    def watch(self, folder: Path | None) -> None:
        return None


NO_PHASES = NoPhases()


class RunPhases:
    """The current phase of the configuration running now (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._told: str | None = None
        self._told_at = 0.0
        self._folder: Path | None = None

    def tell(self, phase: str | None) -> None:
        with self._lock:
            self._told, self._told_at = phase, time.time()
            if phase is None:
                self._folder = None

    def watch(self, folder: Path | None) -> None:
        with self._lock:
            self._folder = folder

    def current(self) -> str | None:
        """The phase in words: the ranks' latest, where they told one since the launcher's
        last, else the launcher's; None between configurations."""
        with self._lock:
            told, told_at, folder = self._told, self._told_at, self._folder
        record = read_phase(folder) if folder is not None else None
        if record is not None and float(record.get("t", 0.0)) >= told_at:
            return describe(record)
        return told
