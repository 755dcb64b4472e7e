"""The ledger of a fault-tolerant run: what each rank did, written as it happens, so that a
rank's measured work survives the rank's death.

Each rank appends one JSON line per event to ``ledger-rank{R}.jsonl`` in the run's working
folder (flushed at once: a SIGKILLed process loses nothing it wrote): every measured step (its
seconds, its meter's window, its tokens, FLOPs, loss and collectives), every checkpoint (the
seconds and joules training waited for it; the bytes once written), the failure it was made to
suffer, and each restart (from the restarted rank's start to its first step again, the loading
of the checkpoint inside it). The same rank number writes the same file in every attempt.

From the ledgers the run is told as it happened (`summarize`): a step recorded in a later
attempt supersedes the same step of an earlier one, which was trained for nothing (work
redone); the failures, restarts and checkpoints become `RunEvent` rows and the repeat's fault
figures. Seconds are wall clock (``time.time()``, comparable across the ranks' processes on one
node); joules are each rank's meter's, summed over the ranks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenbench.energy.base import EnergyWindow
from greenbench.results import RunEvent

LEDGER_GLOB = "ledger-rank*.jsonl"


def ledger_path(out: Path, rank: int) -> Path:
    return out / f"ledger-rank{rank}.jsonl"


class Ledger:
    """One rank's ledger, appended to and flushed line by line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = path.open("a", encoding="utf-8")

    def write(self, kind: str, **fields: Any) -> None:
        self._f.write(json.dumps({"kind": kind, **fields}) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """A ledger's records in order (a line cut short by the rank's death is left out)."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def read_ledgers(out: Path) -> dict[int, list[dict[str, Any]]]:
    """Every rank's ledger in ``out``, by rank ({} for a run that kept none)."""
    ledgers = {}
    for path in sorted(out.glob(LEDGER_GLOB)):
        rank = path.stem[len("ledger-rank") :]
        if rank.isdigit():
            ledgers[int(rank)] = read_ledger(path)
    return ledgers


def useful_steps(records: Iterable[Mapping[str, Any]]) -> tuple[list[dict], list[dict]]:
    """(the step records that count, those redone later), of one rank's ledger: each measured
    step's record from the last attempt that trained it counts, the earlier ones were lost."""
    steps = [dict(r) for r in records if r["kind"] == "step"]
    last = {}
    for r in steps:
        if r["step"] not in last or r["attempt"] >= last[r["step"]]["attempt"]:
            last[r["step"]] = r
    kept = sorted(last.values(), key=lambda r: r["step"])
    ids = {id(r) for r in kept}
    return kept, [r for r in steps if id(r) not in ids]


def joules(windows: Iterable[Mapping[str, Any] | None], part: str = "energy_j") -> float | None:
    """The sum of windows' ``part`` (None when any is unknown)."""
    total = 0.0
    for w in windows:
        value = None if w is None else w.get(part)
        if value is None:
            return None
        total += value
    return total


def combined_window(records: list[dict[str, Any]], seconds: float) -> EnergyWindow | None:
    """One rank's energy over a fault-tolerant run: the sum of every metered segment it
    recorded (steps, redone or not, checkpoints, restarts), over ``seconds`` of wall clock. The
    time between a failure and a restarted rank's start is metered by no rank (said in the
    note)."""
    windows = [r["energy"] for r in records if r.get("energy") is not None]
    if not windows:
        return None
    first = EnergyWindow.from_dict(windows[0])
    longest = max(windows, key=lambda w: w["seconds"])
    # each segment's note has its own load figures: the longest one's stands for them
    notes = [longest["note"]] if longest.get("note") else []
    metered = math.fsum(w["seconds"] for w in windows)
    gap = max(seconds - metered, 0.0)
    notes.append(
        f"a checkpointed run: {len(windows)} metered segments (steps, checkpoints, restarts) "
        f"over {metered:.2f} s of {seconds:.2f} s"
        + (f"; {gap:.2f} s unmetered (between a failure and the restart)" if gap > 0.01 else "")
    )
    return EnergyWindow(
        source=first.source,
        measured=all(w["measured"] for w in windows),
        seconds=seconds,
        energy_j=joules(windows),
        energy_gpu_j=joules(windows, "energy_gpu_j"),
        energy_cpu_j=joules(windows, "energy_cpu_j"),
        energy_dram_j=joules(windows, "energy_dram_j"),
        note="; ".join(notes),
    )


@dataclass(slots=True)
class FaultSummary:
    """A fault-tolerant repeat's figures (`RepeatResult`'s fault fields) and its events."""

    fields: dict[str, Any] = field(default_factory=dict)
    events: list[RunEvent] = field(default_factory=list)
    #: the longest any rank's meter ran (its segments' seconds): the gaps between a failure
    #: and the restarted ranks' start are in the run's seconds but in no meter's
    metered_s: float = 0.0


def _max(values: Iterable[float]) -> float:
    return max(values, default=0.0)


def summarize(ledgers: Mapping[int, list[dict[str, Any]]], repeat: int = 0) -> FaultSummary:
    """The run as its ranks' ledgers tell it (module docstring)."""
    records = [r for rank in sorted(ledgers) for r in ledgers[rank]]
    steps = [r for r in records if r["kind"] == "step"]
    if not steps:
        return FaultSummary()
    origin = min(r["t0"] for r in steps if r["attempt"] == min(s["attempt"] for s in steps))
    events: list[tuple[float, RunEvent]] = []

    def at(t: float) -> float:
        return t - origin

    # checkpoints: the slowest rank's wait, every rank's joules, the bytes rank 0 saw written
    written = {(r["attempt"], r["step"]): r["bytes"] for r in records if r["kind"] == "written"}
    saves: dict[tuple[int, int], list[dict]] = {}
    for r in records:
        if r["kind"] == "checkpoint":
            saves.setdefault((r["attempt"], r["step"]), []).append(r)
    for r in records:  # an asynchronous save a failure came before was complete if loaded
        if r["kind"] == "restart" and r.get("loaded") is not None and "loaded_bytes" in r:
            before = [key for key in saves if key[1] == r["loaded"] and key[0] < r["attempt"]]
            if before:
                written.setdefault(max(before), r["loaded_bytes"])
    ckpt_s = ckpt_j = 0.0
    ckpt_known = True
    ckpt_bytes = 0
    for key, group in sorted(saves.items()):
        seconds = _max(r["seconds"] for r in group)
        j = joules(r.get("energy") for r in group)
        nbytes = written.get(key)
        ckpt_s += seconds
        ckpt_known = ckpt_known and j is not None
        ckpt_j += j or 0.0
        ckpt_bytes += nbytes or 0
        mode = group[0].get("mode", "sync")
        note = f"{mode} save" + (
            "; training waited for the copy to memory, a thread wrote it" if mode == "async" else ""
        )
        if nbytes is None:
            note += "; never completed (a failure cut it short)"
        t0 = min(r["t0"] for r in group)
        events.append(
            (t0, RunEvent(repeat, "checkpoint", step=key[1], t_s=at(t0), seconds=seconds,
                          joules=j, bytes=nbytes, note=note))
        )  # fmt: skip

    # failures, and the work each one cost: the steps trained again, the restart
    failures = sorted((r for r in records if r["kind"] == "failure"), key=lambda r: r["t"])
    redone_by_rank = {rank: useful_steps(ledger)[1] for rank, ledger in ledgers.items()}
    redone = [r for rs in redone_by_rank.values() for r in rs]
    redone_s = math.fsum(
        _max(r["seconds"] for r in redone if r["step"] == k and r["attempt"] == a)
        for a, k in {(r["attempt"], r["step"]) for r in redone}
    )
    redone_j = joules(r.get("energy") for r in redone)
    redone_tokens = sum(r["tokens"] for r in redone)
    restarts = [r for r in records if r["kind"] == "restart"]
    restart_s = 0.0
    restart_j: float | None = 0.0
    for f in failures:
        events.append(
            (f["t"], RunEvent(repeat, "failure", step=f["step"], rank=f["rank"], t_s=at(f["t"]),
                              note="SIGKILL (fault.kill_rank)"))
        )  # fmt: skip
        lost = [r for r in redone if r["attempt"] == f["attempt"]]
        if lost:
            first = min(r["step"] for r in lost)
            events.append(
                (f["t"], RunEvent(
                    repeat, "redone", step=first, t_s=at(f["t"]),
                    seconds=math.fsum(
                        _max(r["seconds"] for r in lost if r["step"] == k)
                        for k in {r["step"] for r in lost}
                    ),
                    joules=joules(r.get("energy") for r in lost),
                    tokens=sum(r["tokens"] for r in lost),
                    note="the measured steps from this one to the failure, trained since the "
                    "last checkpoint and again after the restart; the step the failure "
                    "interrupted is not metered",
                ))
            )  # fmt: skip
        after = [r for r in restarts if r["attempt"] == f["attempt"] + 1]
        if not after:
            continue
        ready = _max(r["t_ready"] for r in after)
        begun = min(r["t_begin"] for r in after)
        seconds = ready - f["t"]
        j = joules(r.get("energy") for r in after)
        restart_s += seconds
        restart_j = None if restart_j is None or j is None else restart_j + j
        loaded = after[0].get("loaded")
        events.append(
            (begun, RunEvent(
                repeat, "restart", step=loaded if loaded is not None else 0, t_s=at(f["t"]),
                seconds=seconds, joules=j,
                note=f"from the failure to training again: {begun - f['t']:.2f} s before the "
                "restarted ranks began (detection, teardown, process start; unmetered), then "
                + ("loading the checkpoint" if loaded is not None else "warm-up from scratch "
                   "(no checkpoint yet)") + " (metered)",
            ))
        )  # fmt: skip
        if loaded is not None:
            events.append(
                (begun, RunEvent(
                    repeat, "load", step=loaded, t_s=at(_max(r["t_load"] for r in after)),
                    seconds=_max(r["load_s"] for r in after),
                    joules=joules(r.get("load_energy") for r in after),
                    bytes=next((r["loaded_bytes"] for r in after if "loaded_bytes" in r), None),
                    note="the checkpoint read back by every rank",
                ))
            )  # fmt: skip

    # the seconds some rank's meter ran: a window's net energy subtracts idle over these only
    metered_s = _max(
        math.fsum(r["energy"]["seconds"] for r in ledger if r.get("energy") is not None)
        for ledger in ledgers.values()
    )
    kept_tokens = sum(r["tokens"] for rank in ledgers for r in useful_steps(ledgers[rank])[0])
    trained = kept_tokens + redone_tokens
    lost_j = None if redone_j is None or restart_j is None else redone_j + restart_j
    fields = {
        "failures": len(failures),
        "tokens_trained": trained,
        "goodput": kept_tokens / trained if trained else None,
        "redone_s": redone_s,
        "redone_j": redone_j,
        "restart_s": restart_s,
        "restart_j": restart_j,
        "energy_lost_j": lost_j,
        "ckpt_count": len(saves),
        "ckpt_s": ckpt_s,
        "ckpt_j": ckpt_j if ckpt_known else None,
        "ckpt_bytes": ckpt_bytes,
    }
    ordered = [e for _, e in sorted(events, key=lambda te: te[0])]
    return FaultSummary(fields, ordered, metered_s)
