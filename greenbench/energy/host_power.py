"""Static power figures of this host, as CodeCarbon models them when no counter exists.

- CPU TDP: CodeCarbon's table ``data/hardware/cpu_power.csv`` (name, TDP in W), matched against
  the CPU model from ``/proc/cpuinfo`` the way CodeCarbon 3.3 does it
  (``codecarbon/core/cpu.py`` ``TDP._get_matching_cpu``): an exact case-insensitive match, then
  again after removing "(R)", " CPU" and the "@ x.xGHz" suffix, then a token-subset match that
  must be unique. Unknown model: CodeCarbon's default of 4 W per logical thread
  (``DEFAULT_POWER_PER_CORE``); no model at all: its 85 W constant (``POWER_CONSTANT`` in
  ``external/hardware.py``). A table TDP is per package and is multiplied by the socket count as
  CodeCarbon does; the per-thread default already covers every socket, so it is not (CodeCarbon
  multiplies it too, which counts multi-socket machines twice).
- RAM power: CodeCarbon 3.3's DIMM heuristic (``external/ram.py``): estimated DIMM count from the
  total memory, 5 W per x86 DIMM (1.5 W on ARM) with diminishing marginal power, minimum 2 DIMMs.

We reimplement the lookup rather than call CodeCarbon because importing it probes GPUs, needs
pandas and rapidfuzz, and logs warnings; the matching rule is ten lines.
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache

from greenbench.energy._codecarbon import codecarbon_data_dir, codecarbon_version

DEFAULT_POWER_PER_THREAD_W = 4.0  # CodeCarbon 3.3 core/cpu.py DEFAULT_POWER_PER_CORE
POWER_CONSTANT_W = 85.0  # CodeCarbon 3.3 external/hardware.py POWER_CONSTANT
RAM_SLOT_POWER_X86_W = 5.0  # CodeCarbon 3.3 external/ram.py RAM_SLOT_POWER_X86
RAM_SLOT_POWER_ARM_W = 1.5


@dataclass(frozen=True, slots=True)
class CpuTdp:
    """The CPU power figure the estimate uses, and where it came from."""

    tdp_w: float  # whole machine: per-package TDP × sockets, or the fallback
    model: str  # CPU model as the OS reports it ("unknown" if none)
    source: str  # human sentence naming the table row or the fallback


def cpu_model_name(cpuinfo_path: str = "/proc/cpuinfo") -> str | None:
    """The "model name" line of /proc/cpuinfo (what CodeCarbon's cpuinfo brand_raw gives)."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_socket_count(cpuinfo_path: str = "/proc/cpuinfo") -> int:
    """Number of distinct "physical id" values in /proc/cpuinfo (1 when none are listed)."""
    ids: set[str] = set()
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "physical id":
                    ids.add(value.strip())
    except OSError:
        pass
    return max(1, len(ids))


@lru_cache(maxsize=1)
def cpu_power_table() -> dict[str, float]:
    """CodeCarbon's CPU TDP table {name: watts}; empty if CodeCarbon is not installed."""
    data = codecarbon_data_dir()
    path = data / "hardware" / "cpu_power.csv" if data else None
    if path is None or not path.is_file():
        return {}
    table: dict[str, float] = {}
    with path.open(encoding="utf-8-sig", newline="") as f:
        for row in csv.DictReader(f):
            try:  # a few rows are malformed (e.g. "27.29.5"); they can never match
                table[row["Name"].strip()] = float(row["TDP"])
            except (TypeError, ValueError):
                continue
    return table


def _tokens(s: str) -> frozenset[str]:
    # rapidfuzz's default_process: lower case, non-alphanumerics become spaces
    return frozenset(re.sub(r"[^0-9a-z]+", " ", s.lower()).split())


def match_cpu(model: str, names: list[str]) -> str | None:
    """The table name matching ``model``, following CodeCarbon's TDP._get_matching_cpu."""
    by_lower = {n.lower(): n for n in names}
    if model.lower() in by_lower:
        return by_lower[model.lower()]
    short = model.replace("(R)", "")
    if (cut := short.find(" CPU @ ")) > 0:
        short = short[:cut]
    short = re.sub(r" @\s*\d+\.\d+GHz", "", short.replace(" CPU", "")).strip()
    if short.lower() in by_lower:
        return by_lower[short.lower()]
    # token_set_ratio == 100 <=> one token set contains the other; CodeCarbon (non-greedy)
    # accepts such a match only when it is the only one.
    mine = _tokens(short)
    hits = [n for n in names if (t := _tokens(n)) and mine and (t <= mine or mine <= t)]
    return hits[0] if len(hits) == 1 else None


def host_cpu_tdp(cpuinfo_path: str = "/proc/cpuinfo", logical_cpus: int | None = None) -> CpuTdp:
    """The whole machine's CPU TDP for the estimate, with its provenance."""
    model = cpu_model_name(cpuinfo_path)
    threads = logical_cpus or os.cpu_count() or 1
    if model is None:
        return CpuTdp(
            POWER_CONSTANT_W,
            "unknown",
            f"CPU model unreadable; CodeCarbon's default constant {POWER_CONSTANT_W:g} W",
        )
    table = cpu_power_table()
    name = match_cpu(model, list(table)) if table else None
    if name is not None:
        sockets = cpu_socket_count(cpuinfo_path)
        return CpuTdp(
            table[name] * sockets,
            model,
            f"codecarbon {codecarbon_version()} cpu_power.csv row {name!r} "
            f"({table[name]:g} W) × {sockets} socket(s)",
        )
    why = "not in CodeCarbon's cpu_power.csv" if table else "CodeCarbon's cpu_power.csv not found"
    return CpuTdp(
        DEFAULT_POWER_PER_THREAD_W * threads,
        model,
        f"{model!r} {why}; fallback CodeCarbon default "
        f"{DEFAULT_POWER_PER_THREAD_W:g} W/thread × {threads} threads",
    )


def estimated_dimm_count(total_gb: float) -> int:
    """CodeCarbon 3.3's guess of how many DIMMs hold ``total_gb`` of memory."""
    if total_gb <= 2:
        return 1
    if total_gb <= 16:
        return 2
    if total_gb <= 64:
        return 4
    if total_gb <= 128:
        return 8
    for dimm_gb in (128, 64, 32, 16, 8, 4):
        if dimm_gb <= total_gb / 8:
            return min(math.ceil(total_gb / dimm_gb), 32)
    return 8


def ram_power_w(total_gb: float, arm: bool = False) -> float:
    """CodeCarbon 3.3's RAM power model: per-DIMM watts with diminishing marginal power."""
    per_dimm = RAM_SLOT_POWER_ARM_W if arm else RAM_SLOT_POWER_X86_W
    floor_w = 3.0 if arm else 2 * per_dimm
    n = estimated_dimm_count(total_gb)
    # full power for the first 4 DIMMs, then 90 %, 80 % and 70 % per extra DIMM
    tiers = ((4, 1.0), (4, 0.9), (8, 0.8), (math.inf, 0.7))
    power, left = 0.0, n
    for size, factor in tiers:
        k = min(left, size)
        power += per_dimm * factor * k
        left -= k
        if left <= 0:
            break
    return max(floor_w, power)
