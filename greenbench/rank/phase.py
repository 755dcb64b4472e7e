"""The phase a configuration's ranks are in, told to the launcher through one small file.

Rank 0 writes ``phase.json`` (`PHASE_FILE`) in the run's working folder, the folder the
launcher made for the run and reads the results from, at each phase change: building the
model, warm-up, each repeat's window, each evaluation of a run to a target, a checkpoint, the
gathering of the results. The file holds the latest phase only (``{"phase": "repeat",
"index": 2, "of": 3, "t": …, "attempt": …}``), written under a temporary name and renamed over
the last (`os.replace`), so the launcher, which polls it for its progress display
(`greenbench.launcher.phases`), never reads half a file. One write per phase change, never per
step, and never inside a measured window (before the meters begin, after they end): a phase
costs a few hundred microseconds where a window's steps are timed not at all. A write that
fails is dropped: progress is never worth a run.

The worker opens the channel (`open_phases`) once it knows its folder and rank; a rank other
than 0, or code run outside a worker (a test training in process), writes nothing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

PHASE_FILE = "phase.json"

_path: Path | None = None
_attempt = 0


def open_phases(out: Path | None, rank: int) -> None:
    """Rank ``rank`` of a run whose working folder is ``out`` tells its phases from now on
    (rank 0 only); None closes the channel."""
    global _path, _attempt
    _path = out / PHASE_FILE if out is not None and rank == 0 else None
    _attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))


def tell(phase: str, **detail: Any) -> None:
    """This rank is now in ``phase`` (``detail``: e.g. ``index`` and ``of`` of a repeat)."""
    if _path is None:
        return
    record = {"phase": phase, **detail, "t": time.time(), "attempt": _attempt}
    tmp = _path.with_name(f".{PHASE_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(record))
        os.replace(tmp, _path)
    except OSError:
        pass


def read_phase(out: Path) -> dict[str, Any] | None:
    """The latest phase rank 0 told in the working folder ``out``, or None (none yet)."""
    try:
        record = json.loads((out / PHASE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("phase"), str) else None


def describe(record: dict[str, Any]) -> str:
    """A told phase in words: "repeat 2/3 (12 steps)", "warm-up (3 steps)", "repeat 1/3:
    evaluation 4", "restart 1: …"."""
    phase = str(record["phase"])
    index, of = record.get("index"), record.get("of")
    if index is not None and of is not None:
        phase = f"{phase} {index}/{of}"
    elif index is not None:
        phase = f"{phase} {index}"
    if record.get("step") is not None:
        phase += f" at step {record['step']}"
    steps = record.get("steps")
    if steps:
        phase += f" ({steps} step{'' if steps == 1 else 's'})"
    if record.get("repeat") is not None and record.get("repeats") is not None:
        phase = f"repeat {record['repeat']}/{record['repeats']}: {phase}"
    if record.get("attempt"):
        phase = f"restart {record['attempt']}: {phase}"
    return phase
