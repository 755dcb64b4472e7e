"""A seeded results database for the dashboard tests, built from the real schema.

Until the shared Store writer and its ``seeded_db`` fixture exist, rows are inserted here with
plain DuckDB. The data covers what the dashboard must handle: measured (rapl, nvml) and
estimated energy, several configurations of two workloads, three repeats per run, two git
shas, a failed run, per-rank rows and power samples.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from greenbench.settings import identity_of

SCHEMA = Path(__file__).resolve().parents[2] / "greenbench" / "store_schema.sql"
OLD_SHA, NEW_SHA = "aaaa1111", "bbbb2222"
#: the git branches of `branches_db`: the old sha's runs were made on main, the new one's on a
#: feature branch
BRANCHES = {OLD_SHA: "main", NEW_SHA: "feature/energy"}
#: a configuration `branches_db` holds on both branches
TWO_BRANCH_CONFIG = "transformer/tiny seq=256 fixed single×1"
T0 = datetime(2026, 1, 5, 9, 0, 0)
CPU = "cpu:AMD EPYC 7B13"
GPU = "NVIDIA H100 80GB HBM3"
#: dashboard row ids (config_key|device_type|energy_source) of two seeded configurations
GPU_ROW_ID = f"key-transformer-vs-mamba-transformer-2048-single-fixed-cuda|{GPU}|nvml"
DDP_ROW_ID = f"key-data-parallel-transformer-512-ddp-longalign-cpu|{CPU}|rapl"


def _config(workload: str, s: dict[str, Any]) -> dict[str, Any]:
    return {"workload": workload, "suite": "smoke", "label": None, "settings": s}


def _runs() -> list[dict[str, Any]]:
    """Run descriptions: (workload, settings, energy source, device) per configuration × sha."""
    out = []
    for family in ("transformer", "mamba"):
        for seq in (256, 1024):
            out.append(
                dict(
                    workload="transformer-vs-mamba",
                    family=family,
                    seq=seq,
                    strategy="single",
                    nproc=1,
                    lengths="fixed",
                    device="cpu",
                    source="estimate",
                    shas=(OLD_SHA, NEW_SHA),
                )
            )
    for strategy in ("ddp", "fsdp"):
        for lengths in ("fixed", "longalign"):
            out.append(
                dict(
                    workload="data-parallel",
                    family="transformer",
                    seq=512,
                    strategy=strategy,
                    nproc=2,
                    lengths=lengths,
                    device="cpu",
                    source="rapl",
                    shas=(NEW_SHA,),
                )
            )
    out.append(
        dict(
            workload="transformer-vs-mamba",
            family="transformer",
            seq=2048,
            strategy="single",
            nproc=1,
            lengths="fixed",
            device="cuda",
            source="nvml",
            shas=(NEW_SHA,),
        )
    )
    return out


def seed_db(path: Path) -> Path:
    """Create ``path`` with the schema and a reproducible set of runs; return the path."""
    rng = random.Random(7)
    con = duckdb.connect(str(path))
    try:
        con.execute(SCHEMA.read_text())
        con.execute("INSERT INTO schema_version VALUES (1, ?)", [T0])
        n = 0
        for spec in _runs():
            for sha in spec["shas"]:
                n += 1
                _insert_run(con, rng, spec, sha, n)
        _insert_failed_run(con)
    finally:
        con.close()
    return path


def _insert_run(
    con: duckdb.DuckDBPyConnection, rng: random.Random, spec: dict[str, Any], sha: str, n: int
) -> None:
    cuda = spec["device"] == "cuda"
    settings = {
        "model.family": spec["family"],
        "model.size": "tiny",
        "strategy": spec["strategy"],
        "nproc": spec["nproc"],
        "nnodes": 1,
        "data.seq_len": spec["seq"],
        "data.lengths": spec["lengths"],
        "device": spec["device"],
    }
    name = (
        f"{spec['family']}/tiny seq={spec['seq']} {spec['lengths']} "
        f"{spec['strategy']}×{spec['nproc']}"
    )
    key = (
        f"key-{spec['workload']}-{spec['family']}-{spec['seq']}-{spec['strategy']}-"
        f"{spec['lengths']}-{spec['device']}"
    )
    run_id = f"{n:012x}"
    started = T0 + timedelta(hours=n if sha == OLD_SHA else 100 + n)
    measured = spec["source"] != "estimate"
    con.execute(
        "INSERT INTO runs (run_id, suite, workload, config_name, config_key, config, model_family,"
        " model_size, strategy, layout, device, device_type, nproc, nnodes, precision, seq_len,"
        " lengths, energy_source, energy_measured, peak_flops, peak_flops_source, region,"
        " carbon_intensity_g_per_kwh, status, git_sha, started_at, finished_at, host, hardware,"
        " versions) VALUES (?, 'smoke', ?, ?, ?, ?, ?, 'tiny', ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?,"
        " ?, ?, 'DEU', 380.0, 'ok', ?, ?, ?, ?, ?, ?)",
        [
            run_id,
            spec["workload"],
            name,
            key,
            json.dumps(_config(spec["workload"], settings)),
            spec["family"],
            spec["strategy"],
            f"dp{spec['nproc']}",
            spec["device"],
            GPU if cuda else CPU,
            spec["nproc"],
            "bf16" if cuda else "fp32",
            spec["seq"],
            spec["lengths"],
            spec["source"],
            measured,
            989e12 if cuda else 2.1e11,
            "datasheet:H100 SXM bf16" if cuda else "cpu-gemm-calibration",
            sha,
            started,
            started + timedelta(minutes=3),
            "gpu-node-1" if cuda else "bench-host",
            json.dumps(
                {
                    "cpu_model": "AMD EPYC 7B13",
                    "cores": 2,
                    "gpus": [GPU] if cuda else [],
                    "driver": "550.54.15" if cuda else None,
                }
            ),
            json.dumps({"python": "3.11.2", "torch": "2.13.0+cpu", "greenbench": "0.1.0"}),
        ],
    )
    base_tps = (16000.0 if cuda else 900.0) * (1.3 if spec["family"] == "mamba" else 1.0)
    base_tps *= 256 / spec["seq"] if spec["family"] == "transformer" else 1.0
    base_tps *= 1.1 if sha == NEW_SHA else 1.0
    for repeat in range(3):
        tps = base_tps * (1 + rng.uniform(-0.03, 0.03))
        seconds = 2.0 + rng.uniform(0, 0.2)
        tokens = int(tps * seconds)
        power_w = (350.0 if cuda else 65.0) * (1 + rng.uniform(-0.02, 0.02))
        energy_j = power_w * seconds
        net_j = energy_j - (60.0 if cuda else 20.0) * seconds
        wait = 0.25 if spec["lengths"] == "longalign" else 0.05
        con.execute(
            "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, energy_source,"
            " energy_measured, energy_j, energy_net_j, idle_power_w, joules_per_token,"
            " net_joules_per_token, flops, mfu, peak_mem_bytes, step_time_p50_s, step_time_p95_s,"
            " wait_fraction, co2_g, loss, energy_note, step_times_s) VALUES"
            " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                repeat,
                tokens,
                seconds,
                tokens / seconds,
                spec["source"],
                measured,
                energy_j,
                net_j,
                20.0,
                energy_j / tokens,
                net_j / tokens,
                1e9 * tokens,
                0.05 * (1 + rng.uniform(-0.1, 0.1)),
                int(3e8 * (1 + spec["seq"] / 1024)),
                0.5,
                0.6,
                wait,
                energy_j / 3.6e6 * 380.0,
                7.5 - 0.1 * repeat,
                "" if measured else "TDP × utilisation model",
                json.dumps([0.5, 0.52, 0.49]),
            ],
        )
        for rank in range(spec["nproc"]):
            rank_wait = wait * seconds * (1.5 if rank == 1 else 0.5)
            con.execute(
                "INSERT INTO rank_results (run_id, repeat, rank, local_rank, host, tokens,"
                " seconds, compute_s, comm_s, wait_s, peak_mem_bytes, flops, loss,"
                " n_microbatches, energy_source, energy_j) VALUES"
                " (?, ?, ?, ?, 'bench-host', ?, ?, ?, ?, ?, ?, ?, ?, 4, ?, ?)",
                [
                    run_id,
                    repeat,
                    rank,
                    rank,
                    tokens // spec["nproc"],
                    seconds,
                    seconds * 0.8 - rank_wait,
                    seconds * 0.2,
                    rank_wait,
                    int(3e8),
                    1e9 * tokens,
                    7.5,
                    spec["source"],
                    energy_j / spec["nproc"] if rank == 0 else None,
                ],
            )
        if measured and repeat == 0:
            for i in range(10):
                con.execute(
                    "INSERT INTO power_samples VALUES (?, 0, 0, ?, ?, ?)",
                    [run_id, 0.2 * i, power_w + 5 * (-1) ** i, "gpu" if cuda else "cpu"],
                )


def _insert_failed_run(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "INSERT INTO runs (run_id, suite, workload, config_name, config_key, config, model_family,"
        " model_size, strategy, layout, device, device_type, nproc, nnodes, precision, seq_len,"
        " lengths, status, error, failed_rank, git_sha, started_at) VALUES ('ffffffffffff',"
        " 'smoke', 'data-parallel', 'transformer/tiny seq=9999 fixed ddp×2', 'key-failed', '{}',"
        " 'transformer', 'tiny', 'ddp', 'dp2', 'cpu', ?, 2, 1, 'fp32', 9999, 'fixed', 'failed',"
        " 'rank 1 raised', 1, ?, ?)",
        [CPU, NEW_SHA, T0],
    )


#: what a Store-like writer does while the dashboard is open: one run, one repeat, one short
#: transaction, from another process (DuckDB's lock is per process)
WRITER_SCRIPT = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("BEGIN")
con.execute(
    "INSERT INTO runs (run_id, suite, workload, config_name, config_key, config, model_family,"
    " model_size, strategy, layout, device, device_type, nproc, nnodes, precision, seq_len,"
    " lengths, energy_source, energy_measured, status, git_sha, started_at) VALUES"
    " ('0000000000aa', 'smoke', 'transformer-vs-mamba', 'mamba/tiny seq=4096 fixed single×1',"
    " 'key-new', '{}', 'mamba', 'tiny', 'single', 'dp1', 'cpu', 'cpu:AMD EPYC 7B13', 1, 1,"
    " 'fp32', 4096, 'fixed', 'rapl', true, 'ok', 'cccc3333', TIMESTAMP '2026-02-01 10:00:00')"
)
con.execute(
    "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, energy_source,"
    " energy_measured, energy_j, joules_per_token, peak_mem_bytes, co2_g) VALUES"
    " ('0000000000aa', 0, 4000, 2.0, 2000.0, 'rapl', true, 200.0, 0.05, 1000000, 0.02)"
)
con.execute("COMMIT")
con.close()
print("written")
"""
NEW_CONFIG = "mamba/tiny seq=4096 fixed single×1"

#: holds the write lock until its stdin closes
HOLDER_SCRIPT = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
con.close()
"""


def write_run_from_other_process(db: Path) -> subprocess.CompletedProcess[str]:
    """Insert one new run the way the launcher would, from a separate process."""
    return subprocess.run(
        [sys.executable, "-c", WRITER_SCRIPT, str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def hold_write_lock(db: Path) -> subprocess.Popen[str]:
    """Start a process that keeps ``db`` open for writing until its stdin is closed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER_SCRIPT, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


@dataclass(frozen=True, slots=True)
class Seeded:
    """What the tests know about the seeded data, and the out-of-process writers."""

    schema: Path = SCHEMA
    gpu_row_id: str = GPU_ROW_ID
    ddp_row_id: str = DDP_ROW_ID
    new_config: str = NEW_CONFIG
    #: `branches_db`'s (sha, branch) pairs, oldest first, and a configuration on both branches
    branches: tuple[tuple[str, str], ...] = tuple(BRANCHES.items())
    two_branch_config: str = TWO_BRANCH_CONFIG
    write_run: Callable[[Path], subprocess.CompletedProcess[str]] = write_run_from_other_process
    hold_lock: Callable[[Path], subprocess.Popen[str]] = hold_write_lock


@pytest.fixture
def seeded() -> Seeded:
    return Seeded()


@pytest.fixture
def dashboard_db(tmp_path: Path) -> Path:
    """A seeded results database in tmp_path."""
    return seed_db(tmp_path / "results.duckdb")


@pytest.fixture
def branches_db(tmp_path: Path) -> Path:
    """The seeded database, migrated by the store (as an old file is when greenbench next
    writes to it), its runs given the git branch of their sha (`BRANCHES`)."""
    from greenbench.store import Store

    path = seed_db(tmp_path / "branches.duckdb")
    Store(path)
    con = duckdb.connect(str(path))
    try:
        for sha, branch in BRANCHES.items():
            con.execute("UPDATE runs SET git_branch = ? WHERE git_sha = ?", [branch, sha])
    finally:
        con.close()
    return path


# --- every kind of figure the trust model tells apart, written through the real Store ----------

#: what `kinds_db` holds besides the shared seeded database (tests/conftest.py: measured rapl,
#: estimates, a failed run): a contended measured run, emulated power-limit runs, simulated
#: SkipPipe runs and a whole-process measurement (`greenbench measure -- CMD`)
CONTENDED_CONFIG = "transformer/tiny seq=768 fixed single×1"
SIMULATED_CONFIGS = ("skippipe gcp12 full", "skippipe gcp12 skippipe")
PROCESS_CONFIG = "process/sleepy"
EMULATED_PREFIX = "transformer/tiny seq=64 fixed single×1 limit="
PARTIAL_CONFIG = "transformer/tiny seq=256 fixed skippipe×2 skip=0.5"


def _window(source: str, measured: bool, seconds: float, power_w: float) -> Any:
    from greenbench.energy.base import EnergyWindow

    return EnergyWindow(
        source=source,
        measured=measured,
        seconds=seconds,
        energy_j=power_w * seconds,
        energy_gpu_j=power_w * seconds if source == "nvml-emulated" else None,
        energy_cpu_j=power_w * seconds if source == "rapl" else None,
    )


def _rank(repeat: int, tokens: int, seconds: float, energy: Any, **kw: Any) -> Any:
    from greenbench.results import RankResult

    fields: dict[str, Any] = dict(
        rank=0, local_rank=0, host="bench-01", repeat=repeat, tokens=tokens, seconds=seconds,
        compute_s=seconds * 0.9, comm_s=0.0, wait_s=seconds * 0.1,
        step_times_s=(seconds / 2, seconds / 2), peak_mem_bytes=int(3e8), flops=6e6 * tokens,
        loss=7.0, n_microbatches=2, energy=energy,
    )  # fmt: skip
    return RankResult(**(fields | kw))


def _write(
    store: Any,
    row: dict[str, Any],
    ranks: list[Any],
    *,
    idle_power_w: float | None = 10.0,
    **outcome: Any,
) -> None:
    from dataclasses import replace

    from greenbench.aggregate import aggregate_repeat
    from greenbench.results import RunOutcome

    note = outcome.pop("note", "")
    repeats = []
    for k in sorted({r.repeat for r in ranks}):
        repeat = aggregate_repeat(
            [r for r in ranks if r.repeat == k],
            idle_power_w=idle_power_w,
            peak_flops=None,
            n_devices=1,
            carbon_g_per_kwh=400.0,
        )
        repeats.append(replace(repeat, energy_note=note) if note else repeat)
    store.begin_run(row)
    store.finish_run(
        row["run_id"], RunOutcome(status="ok", repeats=repeats, ranks=ranks, **outcome)
    )


def _keyed(workload: str, settings: dict[str, Any], **config: Any) -> dict[str, Any]:
    """A seeded run's workload, config_key and stored config, from its workload and settings."""
    from greenbench.vocabulary import config_key

    return {
        "workload": workload,
        "config_key": config_key(identity_of(settings, workload)),
        "config": {"workload": workload, **config, "settings": settings},
    }


def seed_kinds(path: Path) -> Path:
    """Add to the database at ``path`` (the shared seeded one) a contended measured run, an
    emulated power-limit sweep, two simulated SkipPipe runs, a measured SkipPipe run skipping
    half its stages (partial model) and a whole-process measurement."""
    from greenbench.measuring.record import PROCESS_NOTE, PROCESS_STRATEGY
    from greenbench.store import Store
    from greenbench.vocabulary import EMULATED_SOURCE, SIMULATED_SOURCE

    started = T0 + timedelta(days=400)
    base = {
        "suite": "kinds",
        "model_family": "transformer",
        "model_size": "tiny",
        "layout": "dp1",
        "device": "cpu",
        "device_type": CPU,
        "nproc": 1,
        "nnodes": 1,
        "precision": "fp32",
        "lengths": "fixed",
        "git_sha": NEW_SHA,
        "host": "bench-01",
        "region": "world",
        "carbon_intensity_g_per_kwh": 400.0,
    }
    with Store(path) as store:
        settings = {"model.family": "transformer", "data.seq_len": 768}
        _write(
            store,
            base
            | _keyed("transformer-vs-mamba", settings)
            | {
                "run_id": "c0c0c0c0c0c0",
                "config_name": CONTENDED_CONFIG,
                "strategy": "single",
                "seq_len": 768,
                "energy_source": "rapl",
                "energy_measured": True,
                "started_at": started,
            },
            [_rank(k, 3000, 2.0, _window("rapl", True, 2.0, 50.0)) for k in range(3)],
            contended=True,
            others_busy_cores=1.3,
            other_greenbench=1,
        )
        for i, limit in enumerate((700.0, 490.0)):
            settings = {"emulate.gpu": "h100", "gpu.power_limit_w": limit, "data.seq_len": 64}
            _write(
                store,
                base
                | _keyed("power-limit", settings)
                | {
                    "run_id": f"e0e0e0e0e0{i:02d}",
                    "config_name": f"{EMULATED_PREFIX}{limit:g}W",
                    "strategy": "single",
                    "device_type": "emulated:H100 SXM",
                    "seq_len": 64,
                    "power_limit_w": limit,
                    "power_limit_default_w": 700.0,
                    "power_limit_via": "emulated",
                    "started_at": started,
                },
                [
                    _rank(
                        k,
                        int(2000 * (1 - 0.05 * i)),
                        2.0,
                        _window(EMULATED_SOURCE, False, 2.0, limit * 0.9),
                    )
                    for k in range(2)
                ],
                idle_power_w=None,
            )
        for i, (name, schedule) in enumerate(
            zip(SIMULATED_CONFIGS, ("full", "skippipe"), strict=True)
        ):
            settings = {
                "strategy": "skippipe",
                "skippipe.mode": "simulate",
                "skippipe.network": "gcp12",
                "skippipe.schedule": schedule,
                "skippipe.stages": "5-3-3-3-3-3",
            }
            _write(
                store,
                base
                | _keyed("skippipe", settings)
                | {
                    "run_id": f"5151515151{i:02d}",
                    "config_name": name,
                    "strategy": "skippipe",
                    "layout": "pp6",
                    "model_size": "published",
                    "seq_len": 1024,
                    "simulated": True,
                    "device_type": "simulated:gcp12",
                    "nproc": 20,
                    "host": "simulated",
                    "started_at": started,
                },
                [
                    _rank(
                        k,
                        61440,
                        30.0 / (1 + 0.4 * i),
                        _window(SIMULATED_SOURCE, False, 30.0 / (1 + 0.4 * i), 9000.0),
                        peak_mem_bytes=0,
                        flops=0.0,
                        loss=0.0,
                    )
                    for k in range(3)
                ],
                idle_power_w=1400.0,
                note="simulated on skippipe.network=gcp12: modelled energy",
            )
        settings = {"strategy": "skippipe", "skippipe.schedule": "skippipe", "skippipe.skip": 0.5}
        _write(  # a real SkipPipe run skipping half its stages: faster and leaner than any
            store,
            base
            | _keyed("skippipe", settings)
            | {
                "run_id": "5a5a5a5a5a5a",
                "config_name": PARTIAL_CONFIG,
                "strategy": "skippipe",
                "layout": "pp2",
                "seq_len": 256,
                "energy_source": "rapl",
                "energy_measured": True,
                "started_at": started,
            },
            [_rank(k, 20000, 2.0, _window("rapl", True, 2.0, 40.0)) for k in range(3)],
        )
        settings = {"command": "sleep 2", "device": "cpu", "nproc": 1, "nnodes": 1}
        _write(
            store,
            base
            | _keyed(PROCESS_CONFIG, settings, suite=None)
            | {
                "run_id": "9r0c9r0c9r0c".replace("r", "0"),
                "config_name": "sleepy",
                "strategy": PROCESS_STRATEGY,
                "suite": None,
                "model_family": "user",
                "model_size": "sleepy",
                "hardware": {"memory_bytes": 8 * 2**30, "gpus": [], "gpu_driver": None},
                "seq_len": 0,
                "lengths": "user",
                "layout": "dp1",
                "git_sha": None,
                "label": None,
                "energy_source": "rapl",
                "energy_measured": True,
                "started_at": started,
            },
            [
                _rank(
                    0,
                    0,
                    2.1,
                    _window("rapl", True, 2.1, 12.0),
                    flops=0.0,
                    loss=math.nan,
                    peak_mem_bytes=int(5e7),
                )
            ],
            note=PROCESS_NOTE,
        )
    return path


@pytest.fixture
def kinds_db(seeded_db: Path) -> Path:
    """The shared seeded database (measured, estimated, failed) with `seed_kinds` added."""
    return seed_kinds(seeded_db)


@dataclass(frozen=True, slots=True)
class SeededKinds:
    """What `kinds_db` adds (`seed_kinds`)."""

    contended: str = CONTENDED_CONFIG
    simulated: tuple[str, ...] = SIMULATED_CONFIGS
    process: str = PROCESS_CONFIG
    emulated_prefix: str = EMULATED_PREFIX
    partial: str = PARTIAL_CONFIG


@pytest.fixture
def seeded_kinds() -> SeededKinds:
    return SeededKinds()
