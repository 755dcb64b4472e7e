"""GPU power limits around a run: checked before anything runs, set before the warm-up, always
restored, and restored by the next greenbench command after a SIGKILL.

* **Plan** (`plan_limits`, before the database is opened): a configuration with
  ``gpu.power_limit_w`` or ``gpu.power_limit_frac`` reads its devices' limits (NVML, or an
  emulated GPU's, `greenbench.rank.emulated_gpu`) and is refused with one line, exit 2, nothing
  run or written, when this process may not change them (needs root or zeusd) or has no GPU. The
  fraction becomes watts of the default limit, clipped to every device's allowed range with a
  note; the applied watts replace ``gpu.power_limit_w`` in the spec, so they are what its identity
  holds.
* **Hold** (`held_limit`, around one configuration's ranks): each device's limit is written to the
  journal *before* it is changed, the limit is set, the ranks run, and the original is put back in
  a ``finally`` (the end, an exception, SIGINT, and SIGTERM, which the CLI turns into
  KeyboardInterrupt), with SIGINT and SIGTERM blocked meanwhile so that a second signal cannot cut
  the restore short. An entry leaves the journal only once its device is restored.
* **Journal** (``cache_dir()/power-limits.json``): one entry per changed device, with the process
  that changed it (pid and start time, so that a reused pid is not taken for it). A SIGKILL leaves
  its entries behind; `restore_stale`, which every greenbench command runs first (the doctor too),
  restores each entry whose process is gone and says so. An entry whose restore fails (no
  permission now) stays, with a line saying what to run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from greenbench.config import setting_of
from greenbench.energy.power_limit import (
    DeviceLimits,
    LimitControl,
    Permission,
    PowerLimitError,
    PowerLimitRefused,
    clip_w,
)
from greenbench.hardware.machine import power_limit_journal
from greenbench.rank import emulated_gpu
from greenbench.rank.rank_meters import limit_requested
from greenbench.settings import GpuSettings
from greenbench.settings.runspec import RunSpec

#: the setting that holds the watts applied
LIMIT_W = setting_of(GpuSettings, "power_limit_w").key


@dataclass(frozen=True, slots=True)
class LimitPlan:
    """What one configuration's limit will be: the watts applied on devices ``indices``, the
    default limit, the path that applies it (``nvml``, ``zeusd``, ``emulated``), the emulated
    GPU type ("" for real GPUs) and a note (clipping)."""

    indices: tuple[int, ...]
    watts: float
    default_w: float
    via: str
    emulated: str = ""
    note: str = ""

    def row(self) -> dict[str, Any]:
        """The run record's columns of a run under this plan (`launcher.runners.record`)."""
        return {
            "power_limit_w": self.watts,
            "power_limit_default_w": self.default_w,
            "power_limit_via": self.via,
            "power_limit_note": self.note or None,
        }


def control_for(emulated: str) -> LimitControl:
    """The limit control of a configuration's devices: those of the ``emulated`` GPU type's
    model, or ("") the driver's."""
    return LimitControl(emulated_gpu.library(emulated))


# ----------------------------------------------------------------------------- planning


def plan_limits(specs: list[RunSpec]) -> tuple[list[RunSpec], dict[int, LimitPlan]]:
    """Each configuration's limit, checked (PowerLimitRefused when it cannot be applied here),
    and the specs with the applied watts in ``gpu.power_limit_w`` (module docstring)."""
    out: list[RunSpec] = []
    plans: dict[int, LimitPlan] = {}
    for i, spec in enumerate(specs):
        c = spec.config
        if not limit_requested(c.gpu):
            out.append(spec)
            continue
        emulated = emulated_gpu.emulated(spec)
        if c.run.device != "cuda" and not emulated:
            raise PowerLimitRefused(
                f"{spec.name}: a GPU power limit needs GPUs, and this run's device is "
                f"{c.run.device} (run on --device cuda, or set emulate.gpu=h100 to try it on "
                "an emulated GPU)"
            )
        indices = tuple(range(c.run.nproc))
        with control_for(emulated) as control:
            devices = control.read(indices)
            permission = control.permission()
        if not permission.may:
            raise PowerLimitRefused(f"{spec.name}: {permission.why}")
        want = c.gpu.power_limit_w or c.gpu.power_limit_frac * devices[0].default_w
        watts, note = clip_w(want, devices)
        plans[i] = LimitPlan(indices, watts, devices[0].default_w, permission.via, emulated, note)
        out.append(replace(spec, settings={**spec.settings, LIMIT_W: watts}))
    return out, plans


# ----------------------------------------------------------------------------- the journal


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


class Journal:
    """The file of limits greenbench changed and has not restored yet (module docstring)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else power_limit_journal()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[dict[str, Any]]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        with lock.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                entries = self._read()
                yield entries
                if entries:
                    tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(entries, indent=1))
                    tmp.replace(self.path)
                else:
                    self.path.unlink(missing_ok=True)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _read(self) -> list[dict[str, Any]]:
        try:
            entries = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError):
            return []  # unreadable: nothing we could restore from it anyway
        return entries if isinstance(entries, list) else []

    def entries(self) -> list[dict[str, Any]]:
        """Every unrestored change (a copy)."""
        return self._read() if self.path.exists() else []

    def record(self, device: DeviceLimits, applied_w: float, via: str, emulated: str) -> None:
        """Write down ``device``'s limit before this process changes it."""
        with self._locked() as entries:
            entries[:] = [e for e in entries if not _same_device(e, device.uuid, emulated)]
            entries.append(
                {
                    "uuid": device.uuid,
                    "index": device.index,
                    "name": device.name,
                    "emulated": emulated,
                    "via": via,
                    "original_w": device.current_w,
                    "applied_w": applied_w,
                    "pid": os.getpid(),
                    "pid_start": _start_time(os.getpid()),
                    "host": socket.gethostname(),
                    "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                }
            )

    def forget(self, uuid: str, emulated: str) -> None:
        with self._locked() as entries:
            entries[:] = [e for e in entries if not _same_device(e, uuid, emulated)]

    def holder(self, uuid: str, emulated: str) -> dict[str, Any] | None:
        """The entry of another process for this device, if any: one that still runs and holds
        it changed, or one that ended without restoring it (whose original limit must not be
        overwritten by a new record of the changed one)."""
        for e in self.entries():
            if _same_device(e, uuid, emulated) and e.get("pid") != os.getpid():
                return e
        return None


def _same_device(entry: dict[str, Any], uuid: str, emulated: str) -> bool:
    return entry.get("uuid") == uuid and (entry.get("emulated") or "") == (emulated or "")


def _alive(entry: dict[str, Any]) -> bool:
    """Whether the process that wrote ``entry`` still runs (same pid, same start time)."""
    if entry.get("host") not in (None, socket.gethostname()):
        return True  # another host's process: not ours to judge
    start = _start_time(int(entry.get("pid", -1)))
    return start is not None and start == entry.get("pid_start")


# ----------------------------------------------------------------------------- holding


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs (delivered when it ends)."""
    blocked = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@dataclass(slots=True)
class Held:
    """The devices a `held_limit` changed, as they were before, and once the block has ended,
    what could not be restored (each a sentence; the journal keeps those changes)."""

    devices: list[DeviceLimits] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@contextlib.contextmanager
def held_limit(
    spec: RunSpec, plan: LimitPlan | None, journal: Journal | None = None
) -> Iterator[Held]:
    """Hold ``plan``'s limit on its devices while the block runs (module docstring). Without a
    plan, does nothing. A restore that fails after the block ended normally is reported in
    `Held.problems`, not raised (the run's measurement stands); after an exception, on stderr."""
    held = Held()
    if plan is None:
        yield held
        return
    journal = journal or Journal()
    control = control_for(emulated_gpu.emulated(spec))
    changed: list[DeviceLimits] = []
    try:
        with _signals_blocked():
            devices = control.read(plan.indices)
            for d in devices:
                other = journal.holder(d.uuid, plan.emulated)
                if other is not None and _alive(other):
                    raise PowerLimitRefused(
                        f"GPU {d.index} ({d.uuid}) has a power limit set by greenbench process "
                        f"{other['pid']}, which is still running: wait for it to finish"
                    )
                if other is not None:
                    raise PowerLimitRefused(
                        f"GPU {d.index} ({d.uuid}) still has the {other.get('applied_w')} W limit "
                        f"greenbench process {other['pid']} set and never restored (original "
                        f"{other.get('original_w')} W): run `greenbench doctor` with the "
                        "permission to restore it first"
                    )
            for d in devices:
                journal.record(d, plan.watts, plan.via, plan.emulated)
                changed.append(d)
                control.set_w(d, plan.watts, plan.via)
        held.devices = devices
        yield held
    except BaseException:
        for line in _restore_all(control, journal, changed, plan):  # never mask the exception
            sys.stderr.write(f"greenbench: {line}\n")
        raise
    held.problems = _restore_all(control, journal, changed, plan)


def _restore_all(
    control: LimitControl, journal: Journal, devices: list[DeviceLimits], plan: LimitPlan
) -> list[str]:
    with _signals_blocked():
        try:
            return _restore(control, journal, devices, plan)
        finally:
            control.close()


def _restore(
    control: LimitControl, journal: Journal, devices: list[DeviceLimits], plan: LimitPlan
) -> list[str]:
    """Put ``devices`` back to the limits they had; what could not be, as sentences."""
    problems = []
    for d in reversed(devices):
        try:
            control.set_w(d, d.current_w, plan.via)
        except PowerLimitError as e:
            problems.append(
                f"{e} (the change stays in {journal.path}; `greenbench doctor` retries)"
            )
            continue
        journal.forget(d.uuid, plan.emulated)
    return problems


def restore_stale(journal: Journal | None = None) -> list[str]:
    """Restore every journalled limit whose process is gone (a SIGKILLed run); one line per
    device, saying what was restored or what to do. Entries of live processes are left alone."""
    journal = journal or Journal()
    lines = []
    for entry in journal.entries():
        if _alive(entry):
            continue
        what = (
            f"GPU {entry.get('index')} ({entry.get('name')}, {entry.get('uuid')}): power limit "
            f"{entry.get('applied_w'):g} W set by greenbench process {entry.get('pid')} at "
            f"{entry.get('at')}, which did not restore it"
        )
        emulated = entry.get("emulated") or ""
        try:
            with control_for(emulated) as control:
                device = control.read_uuid(entry["uuid"])
                if not emulated:
                    permission = control.permission()
                    if not permission.may:
                        raise PowerLimitError(permission.why)
                    via = permission.via
                else:
                    via = "emulated"
                control.set_w(device, float(entry["original_w"]), via)
        except Exception as e:  # keep the entry: it is the only record of the original limit
            lines.append(f"{what}; could not restore {entry.get('original_w'):g} W now: {e}")
            continue
        journal.forget(entry["uuid"], emulated)
        lines.append(f"{what}; restored to {entry.get('original_w'):g} W")
    return lines


# ----------------------------------------------------------------------------- the doctor


@dataclass(frozen=True, slots=True)
class LimitReport:
    """What `greenbench doctor` says of power limits: every GPU's limits, whether greenbench may
    change them (None without NVML, with ``why``), and changes other runs hold now."""

    devices: list[DeviceLimits]
    permission: Permission | None
    why: str
    held: list[dict[str, Any]]


def doctor_report(journal: Journal | None = None) -> LimitReport:
    """Read every GPU's limits and this process's permission; change nothing."""
    held = [e for e in (journal or Journal()).entries() if _alive(e)]
    try:
        control = LimitControl()
    except PowerLimitRefused as e:
        return LimitReport([], None, str(e), held)
    with control:
        try:
            devices = control.read(range(control.count()), nvml_indices=True)
        except PowerLimitRefused as e:
            return LimitReport([], None, str(e), held)
        return LimitReport(devices, control.permission(), "", held)
