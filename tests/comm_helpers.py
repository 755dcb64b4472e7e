"""Communication-efficient DDP runs for the tests of their views: the comm-efficient
workload's runs at two ranks (each method, on the host's own transport and over an emulated
link, with per-rank communication records) and the convergence suite's methods to a target
over two seeds, written by the real Store. Importable from any test (``pythonpath`` in
pyproject)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from target_helpers import TargetRun, seeds, write_db

from greenbench.aggregate import aggregate_repeat
from greenbench.config import setting_of
from greenbench.energy.base import EnergyWindow
from greenbench.reporting.comm_efficient import link_of, method_of
from greenbench.results import CommRecord, RankResult, RunOutcome
from greenbench.settings import identity_of
from greenbench.settings.target import EvalSettings
from greenbench.strategies.ddp_settings import DDPSettings
from greenbench.strategies.skippipe.settings import SkipPipeSettings
from greenbench.vocabulary import config_key

COMPRESS, RANK = (setting_of(DDPSettings, n).key for n in ("compress", "powersgd_rank"))
SYNC, PERIOD = (setting_of(DDPSettings, n).key for n in ("sync", "period"))
STALENESS = setting_of(DDPSettings, "staleness").key
LATENCY, BANDWIDTH = (
    setting_of(SkipPipeSettings, n).key for n in ("link_latency_ms", "link_bandwidth_gbps")
)
EVERY = setting_of(EvalSettings, "every").key

BF16 = {COMPRESS: "bf16"}
POWERSGD = {COMPRESS: "powersgd", RANK: 4}
LOCAL = {SYNC: "local-sgd", PERIOD: 16}
DILOCO = {SYNC: "diloco", PERIOD: 16}
SLOW = {LATENCY: 10.0, BANDWIDTH: 1.0}
STEPS = 16
T0 = datetime(2026, 3, 3, 9, 0, 0)


def _rank(rank: int, repeat: int, seconds: float, nbytes: int, wait_s: float) -> RankResult:
    """One rank's window of `STEPS` steps: ``nbytes`` all-reduced in two calls' records."""
    comm = (
        CommRecord("world", "all_reduce", STEPS, nbytes - 1000, seconds / 4, wait_s),
        CommRecord("world", "broadcast", 1, 1000, 0.0, 0.0),
    )
    return RankResult(
        rank=rank, local_rank=rank, host="h", repeat=repeat, tokens=STEPS * 1024,
        seconds=seconds, compute_s=seconds / 2, comm_s=seconds / 4, wait_s=wait_s,
        step_times_s=(seconds / STEPS,) * STEPS, peak_mem_bytes=1, flops=1.0, loss=4.5,
        n_microbatches=1, energy=EnergyWindow("rapl", True, seconds, 20.0 * seconds,
                                              energy_cpu_j=20.0 * seconds),
        comm=comm,
    )  # fmt: skip


def write_comm_runs(
    db: Path, runs: list[tuple[str, dict[str, Any], list[float], list[int]]]
) -> Path:
    """comm-efficient runs at two ranks by the real Store: ``(run_id, settings, seconds of each
    repeat's window, bytes of each rank per repeat)``; each rank waits a tenth of its window."""
    from greenbench.store import Store

    with Store(db) as store:
        for i, (run_id, own, windows, per_rank) in enumerate(runs):
            settings = {"strategy": "ddp", "nproc": 2, "nnodes": 1, **own}
            identity = identity_of(settings, "comm-efficient")
            store.begin_run({
                "run_id": run_id, "workload": "comm-efficient", "suite": "comm-efficient",
                "config_name": f"ddp×2 {method_of(settings)} {link_of(settings)}",
                "config_key": config_key(identity),
                "config": {"workload": "comm-efficient", "settings": settings},
                "model_family": "transformer", "model_size": "tiny", "strategy": "ddp",
                "layout": "dp2", "device": "cpu", "device_type": "cpu:test", "nproc": 2,
                "nnodes": 1, "precision": "fp32", "seq_len": 128, "lengths": "fixed",
                "started_at": T0 + timedelta(minutes=i),
            })  # fmt: skip
            ranks, repeats = [], []
            for k, seconds in enumerate(windows):
                these = [_rank(r, k, seconds, b, seconds / 10) for r, b in enumerate(per_rank)]
                ranks += these
                repeats.append(aggregate_repeat(these, idle_power_w=None, peak_flops=None,
                                                n_devices=2, carbon_g_per_kwh=None))  # fmt: skip
            store.finish_run(run_id, RunOutcome(status="ok", repeats=repeats, ranks=ranks))
    return db


MIB = 2**20
COMM_RUNS = [
    # an older DDP of the same configuration: the table takes the newest run only
    ("ddp-old", {}, [9.0, 9.0], [9 * MIB, 9 * MIB]),
    ("ddp", {}, [1.6, 1.7], [16 * MIB, 20 * MIB]),
    ("bf16", BF16, [1.2, 1.3], [8 * MIB, 10 * MIB]),
    ("psgd", POWERSGD, [1.0, 1.1], [MIB // 8, MIB // 8]),
    ("stale", {STALENESS: 1}, [1.5, 1.6], [16 * MIB, 20 * MIB]),
    ("diloco", DILOCO, [1.0, 1.1], [MIB // 2, MIB // 2]),
    ("ddp-slow", SLOW, [8.0, 8.4], [16 * MIB, 20 * MIB]),
    ("local-slow", LOCAL | SLOW, [2.0, 2.1], [MIB, MIB]),
    ("bf16-slow", BF16 | SLOW, [7.9, 8.6], [8 * MIB, 10 * MIB]),  # overlaps DDP's 8.0–8.4
]


def target_runs() -> list[TargetRun]:
    """The convergence suite's methods at two ranks, two seeds each: PowerSGD cheaper than
    DDP, local SGD overlapping it, DiLoCo never reaching the target; and DDP evaluated at
    another cadence (the DDP/FSDP/ODC entry), which is not these methods' DDP."""
    ddp = {"strategy": "ddp", "nproc": 2, EVERY: 16}
    return [
        *seeds("d", ddp, [(True, 10.0, 100.0, 0), (True, 12.0, 120.0, 0)]),
        *seeds("p", ddp | POWERSGD, [(True, 6.0, 60.0, 0), (True, 7.0, 70.0, 0)]),
        *seeds("l", ddp | LOCAL, [(True, 9.0, 90.0, 0), (True, 13.0, 130.0, 0)]),
        *seeds("c", ddp | DILOCO, [(False, 60.0, 600.0, 4.2), (False, 60.0, 640.0, 4.31)]),
        *seeds("other", {"strategy": "ddp", "nproc": 2}, [(True, 1.0, 10.0, 0)] * 2),
    ]


def write_db_with_both(db: Path) -> Path:
    """`target_runs` and `COMM_RUNS` in one database."""
    return write_comm_runs(write_db(db, target_runs()), COMM_RUNS)
