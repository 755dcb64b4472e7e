"""This machine: its CPU's name, its memory, and where greenbench keeps machine-level caches
(calibrations, built kernels). No torch."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """Where greenbench keeps machine-level caches: ``$GREENBENCH_CACHE_DIR`` or
    ``~/.cache/greenbench``."""
    env = os.environ.get("GREENBENCH_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "greenbench"


def power_limit_journal() -> Path:
    """The journal of GPU power limits greenbench changed and has not restored yet
    (`greenbench.launcher.power_limits`): it exists only while it holds an entry, so every
    command can tell in one ``stat`` whether there is anything to restore."""
    return cache_dir() / "power-limits.json"


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


def machine_key() -> str:
    """A short hash of what a per-machine cache entry (a CPU calibration, an idle baseline)
    depends on: the CPU, its logical cores, the memory, the operating system and kernel, the
    Python and greenbench versions. A machine whose fingerprint changes (a new kernel, more
    memory, an image moved to another CPU) finds none of its old entries, and measures anew.
    The host's name is left out: CI runners and containers get a new one for the same
    machine."""
    from greenbench import __version__

    parts = {
        "cpu_model": cpu_model(),
        "logical_cores": logical_cores(),
        "memory_bytes": memory_bytes(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "greenbench": __version__,
    }
    text = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


#: the device files a GPU driver torch can use makes (NVIDIA's, ROCm's, WSL's), Linux
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def no_gpu_driver() -> bool:
    """Whether no CUDA (or ROCm) device can be visible to any process here, known without
    importing torch (a second or two): on Linux no GPU driver's device file exists
    (`GPU_DEVICE_FILES`), on macOS there is no CUDA at all. False where a GPU may be there
    (then only torch can say whether it sees one) and on other systems."""
    system = platform.system()
    if system == "Darwin":
        return True
    if system != "Linux":
        return False
    return not any(os.path.exists(path) for path in GPU_DEVICE_FILES)
