"""Was the machine shared while a configuration ran? Two greenbench runs on one host slow each
other many times over, and a busy CPU skews every figure; a result measured so must say it.

`ContentionWatch` brackets a configuration: it looks for other greenbench processes (runs,
ranks) at the start and the end, and measures the CPU time processes outside this launcher's
own tree used meanwhile (the machine's busy CPU time minus this process's and its reaped
children's, which include every rank). Above `BUSY_SHARE` of the cores, or with another
greenbench seen, the run is stored ``contended`` with a warning saying what was seen, and the
figures go to their own columns (``runs.others_busy_cores``, ``runs.other_greenbench``) so no
view parses the warning.

What is seen of other processes is counted, never named: the warning and the columns hold how
many other greenbench runs and ranks there were and how many cores other processes kept busy,
never a pid or a command line (those carry users' paths and labels into the database and its
exports). The launcher also watches its idle-power sample with it: an idle baseline taken on a
busy machine is unreliable (`greenbench.vocabulary.trust`).
"""

from __future__ import annotations

import os
import resource
import time
from types import TracebackType

import psutil

from greenbench.hardware.machine import cpu_busy_seconds, logical_cores
from greenbench.vocabulary.trust import greenbench_text

#: other processes keeping more than this share of the cores busy make a run contended
BUSY_SHARE = 0.1


def own_cpu_seconds() -> float:
    """CPU-seconds of this process and of every descendant it has reaped (the ranks)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def other_greenbench_processes() -> dict[int, str]:
    """Greenbench runs and ranks that are not this launcher or below it: pid → ``"run"`` or
    ``"rank"``. The pids stay in memory (to count a process seen twice once); nothing of a
    command line is kept."""
    ours = {os.getpid()}
    try:
        ours |= {p.pid for p in psutil.Process().children(recursive=True)}
        ours |= {p.pid for p in psutil.Process().parents()}
    except psutil.Error:
        pass
    found: dict[int, str] = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if proc.info["pid"] in ours or "greenbench" not in cmd:
            continue
        if "greenbench.rank.worker" in cmd:
            found[proc.info["pid"]] = "rank"
        elif " run " in f" {cmd} ":
            found[proc.info["pid"]] = "run"
    return found


def counted(kinds: dict[int, str]) -> str:
    """How many of each kind, e.g. "1 run, 2 ranks"; never which."""
    runs = sum(kind == "run" for kind in kinds.values())
    ranks = len(kinds) - runs
    parts = []
    if runs:
        parts.append(f"{runs} run{'s' if runs != 1 else ''}")
    if ranks:
        parts.append(f"{ranks} rank{'s' if ranks != 1 else ''}")
    return ", ".join(parts)


class ContentionWatch:
    """``with ContentionWatch() as watch: …``; then ``watch.contended``, ``watch.reason`` (the
    stored warning), ``watch.seen`` (what was seen, without the warning's frame), and the
    figures: ``watch.others_busy_cores`` and ``watch.other_greenbench`` (a count)."""

    def __init__(self, busy_share: float = BUSY_SHARE) -> None:
        self.busy_share = busy_share
        self.contended: bool | None = None
        self.reason = ""
        self.seen = ""
        self.others_busy_cores: float | None = None
        self.other_greenbench: int | None = None

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
        seen = self._seen | other_greenbench_processes()
        self.other_greenbench = len(seen)
        reasons = []
        if seen:
            reasons.append(f"{greenbench_text(len(seen))} ran meanwhile ({counted(seen)})")
        wall = end[0] - self._start[0]
        if self._start[1] is not None and end[1] is not None and wall > 0:
            others = max(0.0, (end[1] - self._start[1]) - (end[2] - self._start[2])) / wall
            self.others_busy_cores = others
            cores = logical_cores()
            if others > self.busy_share * cores:
                reasons.append(f"other processes kept {others:.2f} of {cores} cores busy meanwhile")
        self.contended = bool(reasons)
        self.seen = "; ".join(reasons)
        if reasons:
            self.reason = "contended: " + "; ".join(reasons) + " (figures may be skewed)"
        return False
