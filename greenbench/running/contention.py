"""Was the machine shared while a configuration ran? Two greenbench runs on one host slow each
other many times over, and a busy CPU skews every figure; a result measured so must say it.

`ContentionWatch` brackets a configuration: it looks for other greenbench processes (runs,
ranks) at the start and the end, and measures the CPU time processes outside this launcher's
own tree used meanwhile (the machine's busy CPU time minus this process's and its reaped
children's, which include every rank). Above `BUSY_SHARE` of the cores, or with another
greenbench seen, the run is stored ``contended`` with a warning saying what was seen.
"""

from __future__ import annotations

import os
import resource
import time
from types import TracebackType

import psutil

from greenbench.hardware.machine import cpu_busy_seconds, logical_cores

#: other processes keeping more than this share of the cores busy make a run contended
BUSY_SHARE = 0.1


def own_cpu_seconds() -> float:
    """CPU-seconds of this process and of every descendant it has reaped (the ranks)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def other_greenbench_processes() -> list[str]:
    """`pid: command` of greenbench runs and ranks that are not this launcher or below it."""
    ours = {os.getpid()}
    try:
        ours |= {p.pid for p in psutil.Process().children(recursive=True)}
        ours |= {p.pid for p in psutil.Process().parents()}
    except psutil.Error:
        pass
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if proc.info["pid"] in ours or "greenbench" not in cmd:
            continue
        if "greenbench.running.worker" in cmd or " run " in f" {cmd} ":
            found.append(f"{proc.info['pid']}: {cmd[:80]}")
    return found


class ContentionWatch:
    """``with ContentionWatch() as watch: …``; then ``watch.contended`` and ``watch.reason``."""

    def __init__(self, busy_share: float = BUSY_SHARE) -> None:
        self.busy_share = busy_share
        self.contended: bool | None = None
        self.reason = ""
        self.others_busy_cores: float | None = None

    def __enter__(self) -> ContentionWatch:
        self._seen = other_greenbench_processes()
        self._start = (time.monotonic(), cpu_busy_seconds(), own_cpu_seconds())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        end = (time.monotonic(), cpu_busy_seconds(), own_cpu_seconds())
        seen = sorted(set(self._seen) | set(other_greenbench_processes()))
        reasons = []
        if seen:
            reasons.append(f"other greenbench processes ran meanwhile ({'; '.join(seen[:3])})")
        wall = end[0] - self._start[0]
        if self._start[1] is not None and end[1] is not None and wall > 0:
            others = max(0.0, (end[1] - self._start[1]) - (end[2] - self._start[2])) / wall
            self.others_busy_cores = others
            cores = logical_cores()
            if others > self.busy_share * cores:
                reasons.append(f"other processes kept {others:.2f} of {cores} cores busy meanwhile")
        self.contended = bool(reasons)
        if reasons:
            self.reason = "contended: " + "; ".join(reasons) + " (figures may be skewed)"
        return False
