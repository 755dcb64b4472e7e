"""This machine: its CPU's name, its memory, and where greenbench keeps machine-level caches
(calibrations, built kernels). No torch."""

from __future__ import annotations

import functools
import json
import os
import platform
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """Where greenbench keeps machine-level caches: ``$GREENBENCH_CACHE_DIR`` or
    ``~/.cache/greenbench``."""
    env = os.environ.get("GREENBENCH_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "greenbench"


@functools.cache
def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux, else the platform's answer)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def memory_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # psutil missing or unsupported platform
        return None


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Best effort: a cache that cannot be written only costs a recalibration next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass


def cpu_busy_seconds() -> float | None:
    """CPU-seconds this machine's cores have been busy since boot (every process, steal
    included; guest time is inside user), or None where the system does not say."""
    try:
        import psutil

        t = psutil.cpu_times()
    except Exception:  # psutil missing or unsupported platform: unknown
        return None
    fields = ("user", "nice", "system", "irq", "softirq", "steal")
    return sum(float(getattr(t, f, 0.0)) for f in fields)


def logical_cores() -> int:
    try:
        import psutil

        return int(psutil.cpu_count() or os.cpu_count() or 1)
    except Exception:
        return os.cpu_count() or 1
