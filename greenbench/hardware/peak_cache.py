"""The CPU peak calibrations this machine keeps on disk, read without torch.

`greenbench.hardware.cpu_peak` measures a CPU's GEMM peak and keeps each figure in
``cache_dir()/gemm.json``, one entry per machine fingerprint, CPU model, intra-op threads,
dtype and torch version (`disk_key`), each saying when and under what load it was taken and
whether a quiet measurement stands behind it (``trusted``). Reading an entry needs no torch:
what a run would be given can be known before it runs (`greenbench run --dry-run`), and
whether a figure may be trusted asked without importing torch (`cached_entry`). The torch
version of a key is the installed distribution's (``importlib.metadata``), which is what
``torch.__version__`` says.
"""

from __future__ import annotations

import functools
import sys
from importlib import metadata
from typing import Any

from greenbench.hardware.machine import cache_dir, cpu_model, machine_key, read_json

CPU_GEMM_SOURCE = "cpu-gemm-calibration"
GEMM_CACHE = "gemm.json"
#: seconds one calibration measures for (`cpu_peak.cpu_gemm_peak_flops`'s default budget)
DEFAULT_BUDGET_S = 2.4


def dtype_name(precision: str) -> str:
    """The torch dtype name a run of ``precision`` (bf16, fp32) calibrates its peak in."""
    return "bfloat16" if precision == "bf16" else "float32"


def disk_key(threads: int, dtype: str, torch_version: str, fingerprint: str | None = None) -> str:
    """The cache entry's key: this machine's fingerprint (``fingerprint``, by default
    `machine.machine_key`: a new kernel, CPU or memory finds no old entry), its CPU model, the
    intra-op threads, the dtype name and torch's version."""
    machine = f"{fingerprint or machine_key()}|{cpu_model()}"
    return f"{machine}|threads={threads}|{dtype}|torch={torch_version}"


@functools.cache
def torch_version() -> str | None:
    """The installed torch's version (``torch.__version__`` once imported, else its
    distribution's), or None without torch."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def cached_entry(threads: int, dtype: str) -> dict[str, Any] | None:
    """This machine's cache entry for ``threads`` intra-op threads and dtype name ``dtype``
    under the installed torch (its fields: flops, measured_at, load, trusted, …), or None when
    there is none or it is not one (`cpu_peak` measures it then)."""
    version = torch_version()
    if version is None:
        return None
    raw = read_json(cache_dir() / GEMM_CACHE).get(disk_key(threads, dtype, version))
    if not isinstance(raw, dict):
        return None
    flops = raw.get("flops")
    if isinstance(flops, bool) or not isinstance(flops, (int, float)) or flops <= 0:
        return None
    return {**raw, "flops": float(flops), "trusted": raw.get("trusted") is True}
