"""What the hardware can do and what it is: device peaks for MFU, and the run fingerprint.

GPU peaks are dense datasheet figures (the sparse figure printed on datasheets is twice the
dense one), from the NVIDIA A100, H100, H200, Blackwell (B200, GB200), L4 and L40S datasheets,
the NVIDIA Ada Lovelace architecture whitepaper (RTX 4090) and the AMD Instinct MI300X data
sheet, as collected in the project's ``reference/gpus.md``. torchtitan's ``get_peak_flops``
uses the same BF16 values but falls back to the A100 figure for an unknown device; here an
unknown device has no datasheet peak (None), so its MFU is left unknown rather than invented.

A CPU has no trustworthy datasheet figure (turbo, AVX frequency offsets, thread counts), so its
peak is *measured*: the best sustained FLOP/s of square matmuls on this machine, labelled
``cpu-gemm-calibration``. CPU work is never divided by a GPU peak.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

CPU_GEMM_SOURCE = "cpu-gemm-calibration"

# (regex on the device name, label, dense TFLOP/s per dtype). First match wins, so a more
# specific name comes before any name it contains: H200 before H20, GB200 before B200,
# NVL and PCIe before plain H100 (whose default is the SXM part), L40S before L4.
_GPU_PEAKS_TFLOPS: tuple[tuple[str, str, dict[str, float]], ...] = (
    (r"GB200", "GB200", {"bf16": 2500, "tf32": 1250, "fp32": 80}),
    (r"B200", "B200", {"bf16": 2250, "tf32": 1100, "fp32": 75}),
    (r"H200.*NVL", "H200 NVL", {"bf16": 835, "tf32": 417.5, "fp32": 60}),
    (r"H200", "H200 SXM", {"bf16": 989, "tf32": 495, "fp32": 67}),
    (r"H100.*NVL", "H100 NVL", {"bf16": 835, "tf32": 417.5, "fp32": 60}),
    (r"H100.*PCIE", "H100 PCIe", {"bf16": 756, "tf32": 378, "fp32": 51}),
    (r"H100", "H100 SXM", {"bf16": 989, "tf32": 495, "fp32": 67}),
    (r"A100", "A100", {"bf16": 312, "tf32": 156, "fp32": 19.5}),
    (r"L40S", "L40S", {"bf16": 362, "tf32": 183, "fp32": 91.6}),
    (r"\bL4\b", "L4", {"bf16": 121, "tf32": 60, "fp32": 30.3}),
    (r"RTX 4090(?!\s*D)", "RTX 4090", {"bf16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    (r"MI300X", "MI300X", {"bf16": 1307, "tf32": 654, "fp32": 163.4}),
)

_DTYPE_NAMES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "tf32": "tf32",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
}


def _dtype_key(dtype: str | torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.").lower()
    if name not in _DTYPE_NAMES:
        raise ValueError(f"no peak table for dtype {dtype!r}; known: bf16, tf32, fp32")
    return _DTYPE_NAMES[name]


def gpu_peak_flops(device_name: str, dtype: str | torch.dtype) -> tuple[float, str] | None:
    """(dense peak FLOP/s, ``'datasheet:<GPU> <dtype>'``) for a GPU name, or None if unknown.

    ``device_name`` is what ``torch.cuda.get_device_name`` or NVML report, e.g.
    ``'NVIDIA H100 80GB HBM3'``; ``dtype`` is ``bf16``/``tf32``/``fp32`` or a torch dtype.
    """
    key = _dtype_key(dtype)
    for pattern, label, peaks in _GPU_PEAKS_TFLOPS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return peaks[key] * 1e12, f"datasheet:{label} {key}"
    return None


# --------------------------------------------------------------------------- CPU calibration

_GEMM_CACHE: dict[tuple[int, str], float] = {}
_GEMM_SIZES = (256, 512, 1024, 1536)


def cache_dir() -> Path:
    """Where greenbench keeps machine-level caches: ``$GREENBENCH_CACHE_DIR`` or
    ``~/.cache/greenbench``."""
    env = os.environ.get("GREENBENCH_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "greenbench"


def _measure_gemm_flops(dtype: torch.dtype, budget_s: float) -> float:
    """Best sustained FLOP/s over timed loops of n×n matmuls, sizes growing while they are
    quick enough to fit the time budget (so a slow dtype cannot blow the budget)."""
    best = 0.0
    per_size_s = budget_s / len(_GEMM_SIZES)
    gen = torch.Generator().manual_seed(0)
    for n in _GEMM_SIZES:
        a = torch.randn(n, n, generator=gen).to(dtype)
        b = torch.randn(n, n, generator=gen).to(dtype)
        start = time.perf_counter()
        torch.mm(a, b)  # warm-up: first call allocates and picks kernels
        first_s = time.perf_counter() - start
        iters, start = 0, time.perf_counter()
        while True:
            torch.mm(a, b)
            iters += 1
            elapsed = time.perf_counter() - start
            if elapsed >= per_size_s:
                break
        best = max(best, 2.0 * n**3 * iters / elapsed)
        if first_s > per_size_s / 4:  # the next, larger size would overrun the budget
            break
    return best


def cpu_gemm_peak_flops(
    threads: int | None = None,
    dtype: torch.dtype = torch.float32,
    *,
    use_disk_cache: bool = True,
    budget_s: float = 0.6,
) -> float:
    """Measured peak FLOP/s of this CPU for ``threads`` intra-op threads and ``dtype``.

    Cached in-process and on disk (``cache_dir()/gemm.json``, keyed by CPU model, threads,
    dtype and torch version), so a suite calibrates once per machine. The result is the
    "device peak" for CPU MFU and is labelled ``CPU_GEMM_SOURCE`` wherever it is stored.
    """
    threads = threads or torch.get_num_threads()
    dtype_name = str(dtype).removeprefix("torch.")
    if (threads, dtype_name) in _GEMM_CACHE:
        return _GEMM_CACHE[(threads, dtype_name)]
    disk_key = f"{cpu_model()}|threads={threads}|{dtype_name}|torch={torch.__version__}"
    path = cache_dir() / "gemm.json"
    cached = _read_json(path) if use_disk_cache else {}
    flops = cached.get(disk_key)
    if not isinstance(flops, (int, float)) or flops <= 0:
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            flops = _measure_gemm_flops(dtype, budget_s)
        finally:
            torch.set_num_threads(previous)
        if use_disk_cache:
            _write_json(path, {**_read_json(path), disk_key: flops})
    _GEMM_CACHE[(threads, dtype_name)] = float(flops)
    return float(flops)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Best effort: a cache that cannot be written only costs a recalibration next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass


# --------------------------------------------------------------------------- fingerprint


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


def _memory_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # psutil missing or unsupported platform
        return None


def _gpus() -> tuple[list[dict[str, Any]], str | None]:
    gpus: list[dict[str, Any]] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": props.name, "memory_bytes": props.total_memory})
    driver = None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVIDIA driver (or no nvidia-ml-py): nothing to report
        pass
    if isinstance(driver, bytes):
        driver = driver.decode()
    return gpus, driver


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=5, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip()


def _mamba_cpu_scan() -> str:
    """Which selective scan Mamba uses on this machine's CPU: "native" (the C kernel) or
    "torch" (the stepping fallback, several times slower), so results say which they timed."""
    from greenbench.models.scan_native import scan_backend

    return scan_backend()


def fingerprint() -> dict[str, Any]:
    """This machine and software, stored with every run so results can be re-analysed.

    Keys match ``runs`` columns: ``host``, ``git_sha`` (of the repository in the current
    directory, None outside one), ``hardware`` (os, cpu_model, logical_cores, memory_bytes,
    gpus, gpu_driver) and ``versions`` (python, torch, cuda, transformers, duckdb,
    greenbench, git_dirty, mamba_cpu_scan).
    """
    from greenbench import __version__

    gpus, driver = _gpus()
    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if sha else None
    return {
        "host": socket.gethostname(),
        "git_sha": sha or None,
        "hardware": {
            "os": platform.platform(),
            "cpu_model": cpu_model(),
            "logical_cores": os.cpu_count(),
            "memory_bytes": _memory_bytes(),
            "gpus": gpus,
            "gpu_driver": driver,
        },
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": _version("transformers"),
            "duckdb": _version("duckdb"),
            "greenbench": __version__,
            "git_dirty": bool(status) if status is not None else None,
            "mamba_cpu_scan": _mamba_cpu_scan(),
        },
    }
