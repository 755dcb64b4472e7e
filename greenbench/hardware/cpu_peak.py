"""A CPU's peak FLOP/s, measured: CPU work is never divided by a GPU peak.

A CPU has no trustworthy datasheet figure (turbo, AVX frequency offsets, thread counts), so its
peak is *measured*: the best sustained FLOP/s of square matmuls on this machine, labelled
``cpu-gemm-calibration``. CPU work is never divided by a GPU peak.
"""

from __future__ import annotations

import time

import torch

from greenbench.hardware.machine import cache_dir, cpu_model, read_json, write_json

CPU_GEMM_SOURCE = "cpu-gemm-calibration"

_GEMM_CACHE: dict[tuple[int, str], float] = {}
_GEMM_SIZES = (256, 512, 1024, 1536)


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
    cached = read_json(path) if use_disk_cache else {}
    flops = cached.get(disk_key)
    if not isinstance(flops, (int, float)) or flops <= 0:
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            flops = _measure_gemm_flops(dtype, budget_s)
        finally:
            torch.set_num_threads(previous)
        if use_disk_cache:
            write_json(path, {**read_json(path), disk_key: flops})
    _GEMM_CACHE[(threads, dtype_name)] = float(flops)
    return float(flops)
