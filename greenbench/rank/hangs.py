"""Which rank hung, when a configuration runs past its ``timeout_s``.

Every rank registers `faulthandler` on SIGUSR1 (`dump_stacks_on_request`), writing every thread's
Python stack to ``stack-rank<R>.txt`` in the configuration's folder. On a timeout the launcher
sends SIGUSR1 to each rank process (found among its descendants by their ``RANK`` environment
variable), waits a moment, and reads the stacks: a rank whose main thread is inside a
torch.distributed call is waiting for its peers; a rank that is anywhere else never reached the
collective they wait in, and is named. The stacks stay in the kept logs. Nothing is added to a
measured step: a rank pays for this only when it is asked.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

#: frames of a rank blocked in communication (collectives, barriers, DDP's reducer)
_WAITING = re.compile(r"torch/distributed/|torch/nn/parallel/distributed\.py")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_held: list[IO[str]] = []  # the dump files stay open for the life of the rank


def dump_stacks_on_request(out: Path, rank: int) -> None:
    """In a rank: write every thread's stack to ``out/stack-rank<rank>.txt`` on SIGUSR1."""
    handle = (out / f"stack-rank{rank}.txt").open("w")
    _held.append(handle)
    faulthandler.register(signal.SIGUSR1, file=handle, all_threads=True)


@dataclass(frozen=True, slots=True)
class Hang:
    """Who never arrived (``hung``), who was waiting, and where each hung rank was."""

    hung: tuple[int, ...] = ()
    waiting: tuple[int, ...] = ()
    where: tuple[str, ...] = ()

    @property
    def rank(self) -> int | None:
        return self.hung[0] if self.hung else None

    def describe(self) -> str:
        """``"; rank 1 never reached the collective ranks 0 wait in (it was in …)"`` or ``""``."""
        if not self.hung:
            return ""
        names = ", ".join(str(r) for r in self.hung)
        where = "; ".join(self.where)
        if self.waiting:
            peers = ", ".join(str(r) for r in self.waiting)
            return (
                f"; rank {names} never reached the collective rank {peers} waited in "
                f"(it was in {where})"
            )
        return f"; rank {names} was in {where}"


def rank_processes(root_pid: int) -> dict[int, int]:
    """{rank: pid} of the rank processes under ``root_pid`` (itself included: a one-rank run
    has no RANK variable and is rank 0)."""
    found: dict[int, int] = {}
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return found
    for proc in procs:
        try:
            environ = proc.environ()
            cmdline = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "greenbench.rank.worker" not in cmdline or "torch.distributed.run" in cmdline:
            continue
        found[int(environ.get("RANK", 0))] = proc.pid
    return found


def find_hang(root_pid: int, out: Path, settle_s: float = 1.0) -> Hang:
    """Ask every rank under ``root_pid`` for its stacks and say which never arrived."""
    ranks = rank_processes(root_pid)
    for pid in ranks.values():
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            continue
    time.sleep(settle_s)
    stacks = {}
    for rank in ranks:
        try:
            stacks[rank] = (out / f"stack-rank{rank}.txt").read_text(errors="replace")
        except OSError:
            continue
    return classify(stacks)


def classify(stacks: dict[int, str]) -> Hang:
    """Split ranks by their main thread's stack (faulthandler's format, innermost first)."""
    hung, waiting, where = [], [], []
    for rank in sorted(stacks):
        frames = main_thread_frames(stacks[rank])
        if not frames:
            continue
        if any(_WAITING.search(f["file"]) for f in frames[:8]):
            waiting.append(rank)
        else:
            hung.append(rank)
            where.append(describe_frames(frames))
    if not waiting and len(hung) > 1:  # nobody waits: no rank can be told apart
        return Hang()
    return Hang(tuple(hung), tuple(waiting), tuple(where))


def main_thread_frames(text: str) -> list[dict[str, str]]:
    """The frames of the thread that handled the signal (faulthandler's "Current thread")."""
    sections = re.split(r"\n(?=(?:Current thread|Thread) 0x)", "\n" + text)
    current = [s for s in sections if s.lstrip().startswith("Current thread")]
    chosen = current[-1] if current else (sections[-1] if sections else "")
    return [m.groupdict() for m in _FRAME.finditer(chosen)]


def describe_frames(frames: list[dict[str, str]]) -> str:
    """``func`` of the innermost frame, and the innermost greenbench frame when it differs."""
    inner = frames[0]
    text = f"{inner['func']} ({Path(inner['file']).name}:{inner['line']})"
    ours = next((f for f in frames if "greenbench" in f["file"]), None)
    if ours is not None and ours is not inner:
        text += f", called from {ours['func']} ({Path(ours['file']).name}:{ours['line']})"
    return text
