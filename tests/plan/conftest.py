"""A results database of synthetic H100 runs on this host, with known truths to fit.

Every run is transformer/1b on 2 GPUs ("NVIDIA H100 80GB HBM3"), seq 2048, global batch 16,
micro-batch 8, bf16, 2 repeats, written through the real ``Store`` and ``aggregate_repeat``.
Truths: communication transfers at ``α = 10 µs`` and ``β = 1 / 200 GB/s`` (ring formulas of
`greenbench.plan.comm`, 2 ranks); ranks compute at 300 TFLOP/s; each GPU draws 600 W busy,
70 W idle, and waits 10 % of its window. One more run of the same model on an A100 must be
ignored for H100 fits, and one with estimated energy gives no power.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from greenbench.energy.base import EnergyWindow
from greenbench.metrics import aggregate_repeat
from greenbench.results import CommRecord, RankResult, RunOutcome
from greenbench.store import Store
from greenbench.vocabulary import Layout

ALPHA_S, BETA_S_PER_B = 10e-6, 1 / 200e9
SUSTAINED, BUSY_W, IDLE_W, WAIT = 300e12, 600.0, 70.0, 0.1
WINDOW_S, TOKENS_PER_RANK = 10.0, 2 * 8 * 2048 * 4  # 4 steps of 2 microbatches
H100 = "NVIDIA H100 80GB HBM3"

# (run id, layout, strategy, device name, energy measured, message bytes of rank 0's and rank
# 1's records: 40 and 8 calls)
GPU_RUNS = (
    ("aaaa00000001", "dpr1-dps2-tp1-pp1-cp1", "fsdp", H100, True, (2**20, 2**26)),
    ("aaaa00000002", "dpr2-dps1-tp1-pp1-cp1", "ddp", H100, True, (2**24,)),
    ("aaaa00000003", "dpr1-dps2-tp1-pp1-cp1", "fsdp", H100, False, (2**22,)),
    ("aaaa00000004", "dpr1-dps2-tp1-pp1-cp1", "fsdp", "NVIDIA A100-SXM4-80GB", True, (2**20,)),
)


def transfer_s(op: str, calls: int, n_bytes: int) -> float:
    """Seconds ``calls`` calls of ``op`` over 2 ranks moving ``n_bytes`` in all take."""
    a, b = {"all_reduce": (2, 1.0), "all_gather": (1, 0.5), "reduce_scatter": (1, 0.5)}[op]
    return calls * a * ALPHA_S + b * n_bytes * BETA_S_PER_B


def _ranks(run: tuple, repeat: int) -> list[RankResult]:
    _, _, strategy, _, measured, sizes = run
    dim = "dp_shard" if strategy == "fsdp" else "dp_replicate"
    ops = ("all_gather", "reduce_scatter") if strategy == "fsdp" else ("all_reduce",)
    compute_s = WINDOW_S * (1 - WAIT)
    mean_w = (1 - WAIT) * BUSY_W + WAIT * IDLE_W
    ranks = []
    for rank in range(2):
        size, calls = sizes[rank % len(sizes)], (40, 8)[rank]  # one record per op and rank
        comm = tuple(
            CommRecord(dim, op, calls, calls * size, transfer_s(op, calls, calls * size) + 0.01,
                       0.01)
            for op in ops
        )  # fmt: skip
        energy = EnergyWindow(
            source="nvml" if measured else "estimate",
            measured=measured,
            seconds=WINDOW_S,
            energy_j=mean_w * WINDOW_S,
            energy_gpu_j=mean_w * WINDOW_S,
        )
        ranks.append(
            RankResult(
                rank=rank, local_rank=rank, host="gpu-node", repeat=repeat,
                tokens=TOKENS_PER_RANK, seconds=WINDOW_S, compute_s=compute_s,
                comm_s=WINDOW_S * WAIT, wait_s=WINDOW_S * WAIT,
                step_times_s=(WINDOW_S / 4,) * 4, peak_mem_bytes=30 * 2**30,
                flops=SUSTAINED * compute_s, loss=2.0, n_microbatches=2, energy=energy,
                comm=comm,
            )
        )  # fmt: skip
    return ranks


def write_gpu_runs(path: Path, runs: tuple = GPU_RUNS, host: str | None = None) -> Path:
    host = host or socket.gethostname()
    with Store(path) as store:
        for run in runs:
            run_id, layout, strategy, name, measured, _ = run
            degrees = Layout.parse(layout).degrees()
            settings = {
                "model.family": "transformer", "model.size": "1b", "data.seq_len": 2048,
                "data.global_batch": 16, "data.micro_batch": 8, "strategy": strategy,
                "nproc": 2, "nnodes": 1, "device": "cuda", "precision": "bf16",
                **{f"layout.{k}": v for k, v in degrees.items()},
            }  # fmt: skip
            store.begin_run({
                "run_id": run_id, "suite": None, "workload": "hybrid",
                "config_name": f"transformer/1b {layout}",
                "config": {"workload": "hybrid", "settings": settings},
                "model_family": "transformer", "model_size": "1b", "strategy": strategy,
                "layout": layout, **degrees, "device": "cuda", "device_type": name,
                "nproc": 2, "nnodes": 1, "precision": "bf16", "seq_len": 2048,
                "lengths": "fixed", "energy_source": "nvml" if measured else "estimate",
                "energy_measured": measured, "host": host,
            })  # fmt: skip
            ranks = [r for k in range(2) for r in _ranks(run, k)]
            repeats = [
                aggregate_repeat(
                    [r for r in ranks if r.repeat == k],
                    idle_power_w=2 * IDLE_W,
                    peak_flops=989e12,
                    n_devices=2,
                    carbon_g_per_kwh=None,
                )
                for k in range(2)
            ]
            store.finish_run(run_id, RunOutcome(status="ok", repeats=repeats, ranks=ranks))
    return path


@pytest.fixture
def gpu_db(tmp_path: Path) -> Path:
    return write_gpu_runs(tmp_path / "gpu.duckdb")


@pytest.fixture
def gpu_runs_writer() -> Callable[..., Path]:
    """``write_gpu_runs(path, runs=GPU_RUNS, host=None)`` for a test's own database."""
    return write_gpu_runs


@pytest.fixture
def truth() -> SimpleNamespace:
    """The figures the synthetic runs were written with."""
    return SimpleNamespace(
        alpha_s=ALPHA_S, beta_s_per_b=BETA_S_PER_B, sustained=SUSTAINED, busy_w=BUSY_W,
        idle_w=IDLE_W, wait=WAIT, window_s=WINDOW_S, tokens_per_rank=TOKENS_PER_RANK,
    )  # fmt: skip
