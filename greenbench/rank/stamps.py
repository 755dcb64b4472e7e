"""When a rank reached the points of its life the harness's cost is measured between: wall
clock times (seconds since the epoch, so the launcher, another process, can subtract its own).

- ``started``: the process began (the kernel's start time of it, before the interpreter ran);
- ``imported``: the interpreter has started and imported the worker (torch included);
- ``ready``: its model, optimizer and data are built and the first training step begins;
- ``first_step``: the first warm-up step has ended (allocation, kernel choice, compilation);
- ``trained``: the last measured window has ended (the rank's meters read).

Each is kept the first time it is marked; rank 0 writes them to ``stamps.json`` in the run's
working folder when it has gathered the results (a fault-tolerant run's also when it is ready:
a failure may end it before; a restarted rank adds what is missing and keeps what the first
attempt wrote, so start-up is the first attempt's), and the launcher reads them
(`greenbench.launcher.runners.torchrun`): start-up before the first step, the ranks' share of
it, and teardown after the last window are stored with the run (``runs.harness_*``). A rank
that never gets there leaves its stamp out; nothing here can fail a run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

FILE = "stamps.json"
_STAMPS: dict[str, float] = {}


def process_started_at() -> float | None:
    """When this process began (seconds since the epoch), or None where the system does not
    say."""
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # psutil missing, or the process table unreadable
        return None


def mark(name: str) -> None:
    """This rank reached ``name`` now (kept the first time only)."""
    _STAMPS.setdefault(name, time.time())


def write(out: Path) -> None:
    """Add this process's stamps (with ``started``) to ``out/stamps.json``, keeping those it
    already holds; best effort."""
    started = process_started_at()
    mine = dict(_STAMPS, **({"started": started} if started is not None else {}))
    try:
        tmp = out / f".{FILE}.tmp"
        tmp.write_text(json.dumps(mine | read(out)))
        tmp.replace(out / FILE)
    except OSError:
        pass


def read(out: Path) -> dict[str, float]:
    """The stamps rank 0 wrote in ``out`` ({} where it wrote none, or they are unreadable)."""
    try:
        data = json.loads((out / FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        k: float(v)
        for k, v in data.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
