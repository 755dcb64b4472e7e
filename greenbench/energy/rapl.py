"""CPU package and DRAM energy from Linux powercap RAPL counters (``/sys/class/powercap``).

Layout (Intel; AMD Zen exposes the same under ``intel-rapl`` or, on some kernels, ``amd-rapl``)::

    intel-rapl:0/            name "package-0", energy_uj, max_energy_range_uj
    intel-rapl:0/intel-rapl:0:0   name "core"    (inside the package: not read)
    intel-rapl:0/intel-rapl:0:1   name "uncore"  (inside the package: not read)
    intel-rapl:0/intel-rapl:0:2   name "dram"    (outside the package on most CPUs: read)
    intel-rapl:1/            name "psys" on some laptops (contains the package: not read)

We read package domains (→ ``energy_cpu_j``) and domains named "dram" (→ ``energy_dram_j``)
only, so nothing is counted twice. Counters are microjoules that wrap at
``max_energy_range_uj`` (≈ 262 kJ, minutes at server power); a background thread re-reads them
every ``poll_s`` seconds so that a long window is the sum of short, at-most-once-wrapped steps.

We read sysfs ourselves rather than through Zeus because the files are the whole interface, and a
fake tree in a temporary directory tests every branch (Zeus is the ``zeus`` meter).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from greenbench.energy.base import EnergyWindow, Meter, Probe
from greenbench.errors import MeterUnavailable

DEFAULT_ROOT = "/sys/class/powercap"
_TOP = re.compile(r"^(intel|amd)-rapl:\d+$")
_SUB = re.compile(r"^(intel|amd)-rapl:\d+:\d+$")
_PERMISSION_HINT = "needs root or zeusd (or: sudo chmod -R a+r /sys/class/powercap, lost on reboot)"


@dataclass(frozen=True, slots=True)
class RaplDomain:
    """One counter we read: its directory, kind ("cpu" or "dram") and wrap range."""

    path: Path
    name: str  # "package-0", "dram", …
    kind: str  # "cpu" | "dram"
    max_energy_uj: int

    def read_uj(self) -> int:
        return int((self.path / "energy_uj").read_text().strip())


def _read_name(d: Path) -> str:
    try:
        return (d / "name").read_text().strip()
    except OSError:
        return ""


def find_domains(root: str | Path = DEFAULT_ROOT) -> tuple[list[RaplDomain], list[str]]:
    """Package and DRAM domains under ``root`` whose counter is readable, and the problems met.

    Problems are sentences such as "…/energy_uj: permission denied (needs root or zeusd)".
    """
    root = Path(root)
    tops = sorted(p for p in root.iterdir() if _TOP.match(p.name)) if root.is_dir() else []
    # Should a kernel list the same packages under both prefixes, read the intel-rapl ones only.
    if any(p.name.startswith("intel-rapl") for p in tops):
        tops = [p for p in tops if p.name.startswith("intel-rapl")]
    candidates: list[tuple[Path, str, str]] = []
    for top in tops:
        name = _read_name(top)
        if name.startswith("package"):
            candidates.append((top, name, "cpu"))
        elif name == "dram":
            candidates.append((top, name, "dram"))
        for sub in sorted(p for p in top.iterdir() if _SUB.match(p.name)):
            if name.startswith("package") and _read_name(sub) == "dram":
                candidates.append((sub, "dram", "dram"))
    domains: list[RaplDomain] = []
    problems: list[str] = []
    for path, name, kind in candidates:
        try:
            int((path / "energy_uj").read_text().strip())
            max_uj = int((path / "max_energy_range_uj").read_text().strip())
        except PermissionError:
            problems.append(f"{path}/energy_uj: permission denied ({_PERMISSION_HINT})")
            continue
        except (OSError, ValueError) as e:
            problems.append(f"{path}: unreadable ({e})")
            continue
        domains.append(RaplDomain(path, name, kind, max_uj))
    return domains, problems


def wrapped_delta_uj(start_uj: int, end_uj: int, max_energy_uj: int) -> int:
    """Counter advance from ``start_uj`` to ``end_uj``, assuming at most one wrap."""
    return end_uj - start_uj if end_uj >= start_uj else end_uj + max_energy_uj - start_uj


class RaplMeter(Meter):
    """Package (CPU) and DRAM energy of every socket, from powercap RAPL."""

    source: ClassVar[str] = "rapl"
    measured: ClassVar[bool] = True
    #: counters update about every millisecond; 0.1 s keeps quantisation well below 1 %
    min_window_s: ClassVar[float] = 0.1

    def __init__(self, root: str | Path = DEFAULT_ROOT, *, poll_s: float = 10.0) -> None:
        self.root = Path(root)
        self.poll_s = poll_s
        self.domains, self.problems = find_domains(self.root)
        if not any(d.kind == "cpu" for d in self.domains):
            raise MeterUnavailable(f"rapl: {self.probe_at(self.root).reason}")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: list[int] = []
        self._acc_uj: list[int] = []
        self._error: str | None = None
        self._t0 = 0.0
        self._open = False

    @classmethod
    def probe(cls) -> Probe:
        return cls.probe_at(DEFAULT_ROOT)

    @classmethod
    def probe_at(cls, root: str | Path) -> Probe:
        """Probe a given powercap root (the fake trees in tests use this)."""
        root = Path(root)
        if not root.is_dir():
            return Probe(
                cls.source,
                False,
                f"no powercap tree at {root}: RAPL is not exposed here (virtual machine, "
                "container without /sys/class/powercap, or a CPU without RAPL)",
            )
        try:
            domains, problems = find_domains(root)
        except OSError as e:
            return Probe(cls.source, False, f"{root} exists but cannot be listed ({e})")
        cpu = [d.name for d in domains if d.kind == "cpu"]
        dram = [d.name for d in domains if d.kind == "dram"]
        details = {"root": str(root), "cpu_domains": cpu, "dram_domains": dram}
        if cpu:
            reason = f"{len(cpu)} package domain(s), {len(dram)} DRAM domain(s) readable"
            if problems:
                reason += "; skipped: " + "; ".join(problems)
            return Probe(cls.source, True, reason, details)
        if problems:
            return Probe(
                cls.source,
                False,
                f"{root} exists but its RAPL counters are unreadable: " + "; ".join(problems),
                details,
            )
        return Probe(
            cls.source,
            False,
            f"{root} exists but has no intel-rapl/amd-rapl package domain",
            details,
        )

    def _read_all(self) -> list[int]:
        return [d.read_uj() for d in self.domains]

    def checkpoint(self) -> None:
        """Fold the counters' advance since the last read into the window's totals.

        The background thread calls this every ``poll_s``; each step may wrap at most once.
        """
        with self._lock:
            if self._error is not None or not self._open:
                return
            try:
                now = self._read_all()
            except (OSError, ValueError) as e:
                self._error = str(e)
                return
            for i, d in enumerate(self.domains):
                self._acc_uj[i] += wrapped_delta_uj(self._last[i], now[i], d.max_energy_uj)
            self._last = now

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s) and self._error is None:
            self.checkpoint()

    def begin(self) -> None:
        self._stop_thread()
        self._error = None
        self._acc_uj = [0] * len(self.domains)
        self._t0 = time.perf_counter()
        self._open = True
        try:
            self._last = self._read_all()
        except (OSError, ValueError) as e:
            self._error = str(e)
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="greenbench-rapl", daemon=True)
        self._thread.start()

    def _stop_thread(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def end(self) -> EnergyWindow:
        if not self._open:
            raise RuntimeError("RaplMeter.end() called without begin()")
        self.checkpoint()
        seconds = time.perf_counter() - self._t0
        self._stop_thread()
        self._open = False
        if self._error is not None:
            return EnergyWindow(self.source, True, seconds, None, note=f"read error: {self._error}")
        pairs = list(zip(self._acc_uj, self.domains, strict=True))
        cpu_j = sum(a for a, d in pairs if d.kind == "cpu") / 1e6
        drams = [a for a, d in pairs if d.kind == "dram"]
        dram_j = sum(drams) / 1e6 if drams else None
        note = "" if drams else "no readable DRAM domain: CPU package only"
        if self.problems:
            note = "; ".join(filter(None, [note, "skipped: " + "; ".join(self.problems)]))
        return EnergyWindow(
            source=self.source,
            measured=True,
            seconds=seconds,
            energy_j=cpu_j + (dram_j or 0.0),
            energy_cpu_j=cpu_j,
            energy_dram_j=dram_j,
            note=note,
        )

    def close(self) -> None:
        self._stop_thread()
