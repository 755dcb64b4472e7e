"""The per-family rates (`greenbench.planner.family_fit`) recover the rates synthetic stored runs
were written with: a Transformer's matrix products and attention apart (two sequence lengths),
Mamba's at one rate (its scan's FLOPs per token do not vary); tensor-parallel runs are not fitted;
a process's overhead beyond its tensors is the peak less the predicted tensors."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from greenbench.aggregate import aggregate_repeat
from greenbench.models import model_preset
from greenbench.planner.calibrate import fit, stored_runs
from greenbench.planner.cost import Batch, predict
from greenbench.planner.family_fit import fit_rates
from greenbench.planner.host import HOST, host_device, host_facts
from greenbench.planner.memory import per_device
from greenbench.planner.rates import causal_share, device_work
from greenbench.results import RankResult, RunOutcome
from greenbench.store import Store
from greenbench.vocabulary import Layout

DENSE, ATTENTION, MAMBA = 90e9, 30e9, 40e9  # FLOP/s per core the runs were written with
OVERHEAD = 500 * 2**20  # what a process holds beyond its tensors
STEPS = 2

# (run id, family, layout, seq_len): 2 cores; 1 rank has 2 cores, 2 ranks one each
RUNS = (
    ("ffff00000001", "transformer", Layout(), 256),
    ("ffff00000002", "transformer", Layout(), 1024),
    ("ffff00000003", "transformer", Layout(dp_replicate=2), 512),
    ("ffff00000004", "mamba", Layout(), 256),
    ("ffff00000005", "mamba", Layout(dp_shard=2), 512),
    ("ffff00000006", "transformer", Layout(tp=2), 512),  # must not be fitted: 10× slower
)


def _seconds(family: str, layout: Layout, seq_len: int, batch: int) -> float:
    """Compute seconds one rank spends per step at the true rates."""
    work = device_work(model_preset(family, "tiny"), layout, seq_len)
    tokens = batch * seq_len / layout.dp
    cores = 2 / layout.world
    if family == "mamba":
        return tokens * work.total / (MAMBA * cores)
    return tokens * (work.dense / DENSE + work.kernel / ATTENTION) / cores


def write_runs(path: Path) -> Path:
    host = socket.gethostname()
    batch = 4
    with Store(path) as store:
        for run_id, family, layout, seq_len in RUNS:
            world = layout.world
            shape = model_preset(family, "tiny")
            compute = _seconds(family, layout, seq_len, batch) * STEPS
            if layout.tp > 1:
                compute *= 10
            memory = per_device(shape, layout, micro_batch=1, seq_len=seq_len,
                                activation_bytes=4, microbatches=batch // layout.dp)  # fmt: skip
            settings = {
                "model.family": family, "model.size": "tiny", "data.seq_len": seq_len,
                "data.global_batch": batch, "data.micro_batch": 1, "nproc": world,
                "device": "cpu", "precision": "fp32",
                **{f"layout.{k}": v for k, v in layout.degrees().items()},
            }  # fmt: skip
            strategy = "single" if world == 1 else "hybrid"
            store.begin_run({
                "run_id": run_id, "suite": None, "workload": "hybrid",
                "config_name": f"{family}/tiny {layout.text}",
                "config": {"workload": "hybrid", "settings": settings},
                "model_family": family, "model_size": "tiny", "strategy": strategy,
                "layout": layout.text, **layout.degrees(), "device": "cpu",
                "device_type": "cpu:Test CPU", "nproc": world, "nnodes": 1,
                "precision": "fp32", "seq_len": seq_len, "lengths": "fixed",
                "energy_source": "estimate", "energy_measured": False, "host": host,
                "kernels": {"scan": "native"} if family == "mamba" else {"attention": "sdpa"},
            })  # fmt: skip
            ranks = [
                RankResult(
                    rank=rank, local_rank=rank, host="cpu-node", repeat=0, tokens=1000,
                    seconds=compute * 1.1, compute_s=compute, comm_s=compute * 0.1, wait_s=0.0,
                    step_times_s=(compute * 1.1 / STEPS,) * STEPS,
                    peak_mem_bytes=int(OVERHEAD + memory.total_b), flops=1e9, loss=2.0,
                    n_microbatches=batch // layout.dp, energy=None,
                )
                for rank in range(world)
            ]  # fmt: skip
            repeat = aggregate_repeat(ranks, idle_power_w=None, peak_flops=None,
                                      n_devices=world, carbon_g_per_kwh=None)  # fmt: skip
            hardware = {"cpu_model": "Test CPU", "logical_cores": 2, "memory_bytes": 8e9}
            store.finish_run(run_id, RunOutcome(status="ok", repeats=[repeat], ranks=ranks,
                                                hardware=hardware))  # fmt: skip
    return path


@pytest.fixture
def family_db(tmp_path: Path) -> Path:
    return write_runs(tmp_path / "families.duckdb")


def test_the_fit_recovers_each_familys_rates(family_db: Path) -> None:
    c = fit(stored_runs(family_db, HOST))
    t, m = c.family_rates["transformer"], c.family_rates["mamba"]
    assert t.dense_flops == pytest.approx(DENSE, rel=1e-6)
    assert t.kernel_flops == pytest.approx(ATTENTION, rel=1e-6)
    assert t.runs == 3 and t.kernel == "sdpa" and t.note == ""  # the tp run is not fitted
    assert m.dense_flops == pytest.approx(MAMBA, rel=1e-6) == m.kernel_flops
    assert m.runs == 2 and m.kernel == "native" and "one rate" in m.note
    assert c.process_overhead_b == pytest.approx(OVERHEAD, rel=1e-6)


def test_a_calibrated_host_predicts_the_runs_compute(family_db: Path) -> None:
    runs = stored_runs(family_db, HOST)
    c = fit(runs)
    device = host_device(host_facts(runs), 2, calibration=c)
    shape = model_preset("transformer", "tiny")
    layout = Layout(dp_replicate=2)
    p = predict(shape, layout, Batch(512, 4, 1, "fp32"), device)
    assert p is not None
    assert p.compute_s == pytest.approx(_seconds("transformer", layout, 512, 4), rel=1e-6)


def test_one_rate_where_the_kernel_share_does_not_vary() -> None:
    rows = [(2e9, 1e9, 0.05), (4e9, 2e9, 0.1)]  # 3e9 FLOPs at 60 GFLOP/s, twice
    dense, kernel, note = fit_rates(rows)
    assert dense == kernel == pytest.approx(60e9)
    assert "one rate" in note


def test_causal_share_and_the_context_splits_imbalance() -> None:
    assert causal_share(4) == pytest.approx((4 + 1) / 8)  # each token: the keys up to itself
    assert causal_share(1024) == pytest.approx(0.5, abs=1e-3)
    # the last of 2 ranks: its chunk against the first chunk whole, and its own causally
    assert causal_share(1024, 2) == pytest.approx((512 + 513 / 2) / 1024)
    assert causal_share(1024, 4) / causal_share(1024) == pytest.approx(7 / 4, rel=1e-2)


def test_attention_is_discounted_and_a_scan_is_not() -> None:
    t = model_preset("transformer", "tiny")
    full = t.planner.kernel_flops(t.info, 512)
    assert device_work(t, Layout(), 512).kernel == pytest.approx(
        full * t.n_layers * causal_share(512)
    )
    m = model_preset("mamba", "tiny")
    scan = m.planner.kernel_flops(m.info, 512) * m.n_layers
    assert device_work(m, Layout(), 512).kernel == pytest.approx(scan)
    # every family's two terms add up to its card's FLOP count (the causal discount aside)
    for family in ("transformer", "mamba", "mamba2"):
        s = model_preset(family, "tiny")
        blocks = s.n_layers * (6 * s.params_per_layer() + s.planner.kernel_flops(s.info, 256))
        assert blocks + 6 * s.head_params == pytest.approx(s.flops_per_token(256))
