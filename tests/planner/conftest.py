"""Results databases of synthetic runs on this host, with known truths to fit: H100 runs, and
CPU runs of a 2-core host (further down).

Every run is transformer/1b on 2 GPUs ("NVIDIA H100 80GB HBM3"), seq 2048, global batch 16,
micro-batch 8, bf16, 2 repeats, written through the real ``Store`` and ``aggregate_repeat``.
Truths: communication transfers at ``α = 10 µs`` and ``β = 1 / 200 GB/s`` (ring formulas of
`greenbench.planner.alpha_beta`, 2 ranks); ranks compute at 300 TFLOP/s; each GPU draws 600 W busy,
70 W idle, and waits 10 % of its window. One more run of the same model on an A100 must be
ignored for H100 fits, and one with estimated energy gives no power.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from greenbench.aggregate import aggregate_repeat
from greenbench.energy.base import EnergyWindow
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


# ---------------------------------------------------------------------------- a CPU host
#
# transformer/tiny runs on a 2-core host ("cpu:Test CPU"), fp32, seq 256, global batch 8,
# micro-batch 1, 1 repeat. Truths: one core computes 80 GFLOP/s and transfers at α = 100 µs,
# β = 1.5 ns/B per core (a rank with half a core, under a quota, takes twice as long); each rank
# counted 2 MB of model state. DDP's records are the exposed tail of its all-reduce (a fraction
# of a transfer) and must not be fitted.

CPU_PER_CORE, CPU_ALPHA_S, CPU_BETA = 80e9, 100e-6, 1.5e-9
CPU_TYPE, CPU_WINDOW_S, CPU_STEPS = "cpu:Test CPU", 4.0, 2

# (run id, strategy, ranks, lengths, bytes per FSDP call)
CPU_RUNS = (
    ("cccc00000001", "fsdp", 2, "fixed", 2**20),
    ("cccc00000002", "fsdp", 4, "fixed", 2**22),
    ("cccc00000003", "ddp", 2, "fixed", 0),
    ("cccc00000004", "ddp", 2, "longalign", 0),
    ("cccc00000005", "single", 1, "fixed", 0),
)


def _cpu_ranks(run: tuple) -> list[RankResult]:
    _, strategy, world, _, size = run
    share = min(max(1, 2 // world), 2 / world)  # cores per rank on 2 cores
    compute_s = CPU_WINDOW_S * 0.9
    comm: tuple[CommRecord, ...] = ()
    if strategy == "fsdp":
        calls = 10
        comm = tuple(
            CommRecord("dp_shard", op, calls, calls * size,
                       (calls * (world - 1) * CPU_ALPHA_S
                        + (world - 1) / world * calls * size * CPU_BETA) / share, 0.0)
            for op in ("all_gather", "reduce_scatter")
        )  # fmt: skip
    elif strategy == "ddp":
        comm = (CommRecord("dp_replicate", "all_reduce", 2, 2**24, 1e-4, 0.0),)
    return [
        RankResult(
            rank=rank, local_rank=rank, host="cpu-node", repeat=0, tokens=1000,
            seconds=CPU_WINDOW_S, compute_s=compute_s, comm_s=CPU_WINDOW_S * 0.1, wait_s=0.0,
            step_times_s=(CPU_WINDOW_S / CPU_STEPS,) * CPU_STEPS, peak_mem_bytes=600 * 2**20,
            flops=CPU_PER_CORE * share * compute_s, loss=2.0, n_microbatches=4, energy=None,
            comm=comm, param_bytes=250_000, grad_bytes=250_000, optim_bytes=500_000,
            activation_bytes=1_000_000,
        )
        for rank in range(world)
    ]  # fmt: skip


def write_cpu_runs(path: Path, runs: tuple = CPU_RUNS, host: str | None = None) -> Path:
    host = host or socket.gethostname()
    with Store(path) as store:
        for run in runs:
            run_id, strategy, world, lengths, _ = run
            layout = {"fsdp": Layout(dp_shard=world), "ddp": Layout(dp_replicate=world)}.get(
                strategy, Layout()
            )
            settings = {
                "model.family": "transformer", "model.size": "tiny", "data.seq_len": 256,
                "data.global_batch": 8, "data.micro_batch": 1, "strategy": strategy,
                "nproc": world, "nnodes": 1, "device": "cpu", "precision": "fp32",
                "data.lengths": lengths,
                **{f"layout.{k}": v for k, v in layout.degrees().items()},
            }  # fmt: skip
            store.begin_run({
                "run_id": run_id, "suite": None, "workload": "data-parallel",
                "config_name": f"transformer/tiny {layout.text}",
                "config": {"workload": "data-parallel", "settings": settings},
                "model_family": "transformer", "model_size": "tiny", "strategy": strategy,
                "layout": layout.text, **layout.degrees(), "device": "cpu",
                "device_type": CPU_TYPE, "nproc": world, "nnodes": 1, "precision": "fp32",
                "seq_len": 256, "lengths": lengths, "energy_source": "estimate",
                "energy_measured": False, "host": host, "rank_cpu_quota": world > 2,
            })  # fmt: skip
            ranks = _cpu_ranks(run)
            repeat = aggregate_repeat(
                ranks, idle_power_w=None, peak_flops=None, n_devices=world, carbon_g_per_kwh=None
            )
            hardware = {"cpu_model": "Test CPU", "logical_cores": 2, "memory_bytes": 8e9}
            store.finish_run(
                run_id,
                RunOutcome(status="ok", repeats=[repeat], ranks=ranks, peak_flops=1e11 * (
                    2 if world == 1 else 1), peak_flops_source="cpu-gemm-calibration",
                    hardware=hardware),
            )  # fmt: skip
    return path


@pytest.fixture
def cpu_db(tmp_path: Path) -> Path:
    return write_cpu_runs(tmp_path / "cpu.duckdb")


@pytest.fixture
def cpu_runs_writer() -> Callable[..., Path]:
    """``write_cpu_runs(path, runs=CPU_RUNS, host=None)`` for a test's own database."""
    return write_cpu_runs


@pytest.fixture
def cpu_truth() -> SimpleNamespace:
    """The figures the synthetic CPU runs were written with."""
    return SimpleNamespace(per_core=CPU_PER_CORE, alpha_s=CPU_ALPHA_S, beta=CPU_BETA,
                           window_s=CPU_WINDOW_S, steps=CPU_STEPS, runs=CPU_RUNS)  # fmt: skip
