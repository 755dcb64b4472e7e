"""A CPU's peak FLOP/s, measured: CPU work is never divided by a GPU peak.

A CPU has no trustworthy datasheet figure (turbo, AVX frequency offsets, thread counts), so its
peak is *measured*: the best sustained FLOP/s of square matmuls on this machine, labelled
``cpu-gemm-calibration``. CPU work is never divided by a GPU peak.

A calibration taken while other processes hold cores comes out low (on 2 cores, one busy
neighbour halves a 2-thread GEMM), and a low peak inflates MFU, even past 1. So a calibration
runs several sustained trials spread over its budget and keeps the best; it watches how much CPU
*other* processes used while it ran (the machine's busy CPU time minus this process's own, from
the kernel's counters: the load average would count the calibration's own threads); and its
disk cache entry says when the figure was taken and under what load. An entry no quiet
measurement stands behind (taken under load, or written before entries said) is measured again
when next asked for, keeping the best figure so far; a run that beats its peak anyway makes the
launcher measure once more (``recalibrate=True``).

Each run stores the figure it was given, so runs of one configuration may store different peaks
(one taken while the machine was busy). Readers never compare MFU across them as stored: the
store reads every CPU run's MFU against the highest calibration stored for its machine, thread
count and precision, keeping the run's own beside it (`greenbench.store.views`).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

import torch

from greenbench.hardware import peak_cache
from greenbench.hardware.machine import (
    cache_dir,
    cpu_busy_seconds,
    logical_cores,
    machine_key,
    read_json,
    write_json,
)
from greenbench.hardware.peak_cache import CPU_GEMM_SOURCE, DEFAULT_BUDGET_S, GEMM_CACHE

__all__ = ["CPU_GEMM_SOURCE", "calibration_record", "cpu_gemm_peak_flops", "describe"]

_GEMM_CACHE: dict[tuple[int, str], float] = {}
#: what stands behind each in-process figure (the disk cache entry's fields), for notes
_GEMM_RECORDS: dict[tuple[int, str], dict[str, Any]] = {}
#: seconds this process has spent calibrating (the harness's own cost a run stores)
_SPENT_S = [0.0]
_GEMM_SIZES = (256, 512, 1024, 1536)
#: rounds over the sizes; each size's best round counts (sustained: each loop ~0.2 s)
TRIALS = 3
#: the machine counts as busy when other processes kept more than this share of its cores busy
#: while the calibration ran (on 2 cores: 0.2 of a core)
BUSY_SHARE = 0.1
#: a shorter watch says nothing about load (the kernel's CPU counters tick every 10 ms)
_MIN_WATCH_S = 0.1


def _mm_rate(a: torch.Tensor, b: torch.Tensor, seconds: float) -> float:
    """FLOP/s of ``a @ b`` repeated for ``seconds`` (at least once)."""
    n = a.shape[0]
    iters, start = 0, time.perf_counter()
    while True:
        torch.mm(a, b)
        iters += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return 2.0 * n**3 * iters / elapsed


def _measure_gemm_flops(dtype: torch.dtype, budget_s: float) -> float:
    """Best sustained FLOP/s over ``TRIALS`` rounds of timed loops of n×n matmuls. Sizes grow
    while their first call is quick enough for the budget (so a slow dtype cannot blow it); the
    rounds are spread over the whole budget, so a burst of load elsewhere spoils a trial, not
    the figure."""
    per_loop_s = budget_s / (len(_GEMM_SIZES) * TRIALS)
    gen = torch.Generator().manual_seed(0)
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    for n in _GEMM_SIZES:
        a = torch.randn(n, n, generator=gen).to(dtype)
        b = torch.randn(n, n, generator=gen).to(dtype)
        start = time.perf_counter()
        torch.mm(a, b)  # warm-up: first call allocates and picks kernels
        first_s = time.perf_counter() - start
        pairs.append((a, b))
        if first_s > per_loop_s / 4:  # the next, larger size would overrun the budget
            break
    return max(_mm_rate(a, b, per_loop_s) for _ in range(TRIALS) for a, b in pairs)


def _cpu_counters() -> tuple[float, float, float] | None:
    """(wall seconds, CPU-seconds the machine's cores were busy, CPU-seconds of this process),
    or None where the system does not say."""
    busy = cpu_busy_seconds()
    return None if busy is None else (time.monotonic(), busy, time.process_time())


def _cores() -> int:
    return logical_cores()


def _loadavg_1m() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def _load_while(
    before: tuple[float, float, float] | None,
    after: tuple[float, float, float] | None,
    loadavg: tuple[float | None, float | None],
) -> dict[str, Any]:
    """How busy *other* processes kept the machine between two counter readings. ``busy`` is
    None (unknown) when the counters are missing or the window too short to judge."""
    cores = _cores()
    record: dict[str, Any] = {
        "cores": cores,
        "others_busy_cores": None,
        "busy": None,
        "loadavg_1m_before": loadavg[0],
        "loadavg_1m_after": loadavg[1],  # counts the calibration's own threads
    }
    if before is not None and after is not None and after[0] - before[0] >= _MIN_WATCH_S:
        wall = after[0] - before[0]
        others = max(0.0, ((after[1] - before[1]) - (after[2] - before[2])) / wall)
        record["others_busy_cores"] = round(others, 3)
        record["busy"] = others > BUSY_SHARE * cores
    return record


def _calibrate(threads: int, dtype: torch.dtype, budget_s: float) -> dict[str, Any]:
    """One measurement with ``threads`` intra-op threads, and the load it was taken under."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    load_before = _loadavg_1m()
    before = _cpu_counters()
    started = time.perf_counter()
    try:
        flops = float(_measure_gemm_flops(dtype, budget_s))
    finally:
        after = _cpu_counters()
        torch.set_num_threads(previous)
        _SPENT_S[0] += time.perf_counter() - started
    load = _load_while(before, after, (load_before, _loadavg_1m()))
    return {
        "flops": flops,
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "load": load,
        "trusted": load["busy"] is False,
        "measurements": 1,
        "budget_s": budget_s,
        "trials": TRIALS,
    }


def _entry(raw: object) -> dict[str, Any] | None:
    """A disk cache entry in this version's form; an older bare number says neither when nor
    under what load it was taken, so nothing vouches for it."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw > 0:
        return {"flops": float(raw), "measured_at": None, "load": None, "trusted": False,
                "measurements": 1}  # fmt: skip
    if isinstance(raw, dict):
        flops = raw.get("flops")
        if isinstance(flops, (int, float)) and not isinstance(flops, bool) and flops > 0:
            return {**raw, "flops": float(flops), "trusted": raw.get("trusted") is True}
    return None


def _merge(previous: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """The best figure of every measurement so far (load can only pull a GEMM rate down), with
    the time and load of that best one; trusted once any measurement was taken quiet."""
    if previous is None:
        return new
    best = new if new["flops"] >= previous["flops"] else previous
    return {
        **best,
        "trusted": bool(previous.get("trusted")) or bool(new["trusted"]),
        "measurements": int(previous.get("measurements") or 1) + 1,
        "last_measured_at": new["measured_at"],
        "last_load": new["load"],
    }


def describe(record: dict[str, Any] | None) -> str:
    """When and under what load a calibration's figure was taken, in words, for notes."""
    if not record or not record.get("measured_at"):
        return "an older cache entry that says neither when nor under what load it was taken"
    load = record.get("load") or {}
    others, cores = load.get("others_busy_cores"), load.get("cores")
    if others is None:
        how = "load unknown"
    elif load.get("busy"):
        how = f"under load: other processes kept {others:.2f} of {cores} cores busy"
    else:
        how = f"on a quiet machine (others kept {others:.2f} of {cores} cores busy)"
    return f"measured {record['measured_at']}, {how}"


def calibration_record(threads: int, dtype: torch.dtype = torch.float32) -> dict[str, Any] | None:
    """What stands behind this process's figure for ``threads`` and ``dtype`` (the cache
    entry's fields: flops, measured_at, load, trusted, measurements), or None if none yet."""
    record = _record_of((threads, str(dtype).removeprefix("torch.")))
    return dict(record) if record is not None else None


def _record_of(key: tuple[int, str]) -> dict[str, Any] | None:
    """The record behind this process's cached figure; None if the figure came otherwise."""
    record = _GEMM_RECORDS.get(key)
    if key not in _GEMM_CACHE or record is None or record["flops"] != _GEMM_CACHE[key]:
        return None
    return record


def seconds_spent() -> float:
    """Seconds this process has spent measuring CPU peaks so far: the difference across a
    call is what that call cost (0 when its figure came from a cache)."""
    return _SPENT_S[0]


def disk_key(threads: int, dtype_name: str) -> str:
    """A figure's key in the disk cache (`greenbench.hardware.peak_cache.disk_key`: this
    machine's fingerprint, its CPU, the threads, the dtype and torch's version)."""
    return peak_cache.disk_key(threads, dtype_name, torch.__version__, machine_key())


def cpu_gemm_peak_flops(
    threads: int | None = None,
    dtype: torch.dtype = torch.float32,
    *,
    use_disk_cache: bool = True,
    budget_s: float = DEFAULT_BUDGET_S,
    recalibrate: bool = False,
) -> float:
    """Measured peak FLOP/s of this CPU for ``threads`` intra-op threads and ``dtype``.

    Cached in-process and on disk (``cache_dir()/gemm.json``, keyed by `disk_key`: the
    machine's fingerprint, CPU model, threads, dtype and torch version; each entry says when
    its figure was measured and under what load), so a machine calibrates once, not every run.
    A disk entry that no quiet measurement stands behind is measured again, and the best
    figure kept. ``recalibrate`` measures again whatever the
    caches hold (the launcher's answer to a run that beat its peak); the figure never drops.
    The result is the "device peak" for CPU MFU, labelled ``CPU_GEMM_SOURCE`` where stored.
    """
    threads = threads or torch.get_num_threads()
    dtype_name = str(dtype).removeprefix("torch.")
    key = (threads, dtype_name)
    if key in _GEMM_CACHE and not recalibrate:
        return _GEMM_CACHE[key]
    key_on_disk = disk_key(threads, dtype_name)
    path = cache_dir() / GEMM_CACHE
    previous = _entry(read_json(path).get(key_on_disk)) if use_disk_cache else None
    if previous is not None and previous["trusted"] and not recalibrate:
        entry = previous
    else:
        mine = _record_of(key)  # this process's figure, if better than the disk's
        if mine is not None and (previous is None or mine["flops"] > previous["flops"]):
            previous = mine
        entry = _merge(previous, _calibrate(threads, dtype, budget_s))
        if use_disk_cache:
            write_json(path, {**read_json(path), key_on_disk: entry})
    _GEMM_CACHE[key] = float(entry["flops"])
    _GEMM_RECORDS[key] = entry
    return float(entry["flops"])
