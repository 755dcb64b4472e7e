"""Fixtures shared by the whole test suite.

``seeded_db`` is a results database written through the real ``Store`` API, its repeats
aggregated by the real ``metrics.aggregate_repeat`` from synthetic rank results. Contents
(12 runs, in this order, started one hour apart up to an hour ago, finished when written):

1-6.  transformer-vs-mamba, {transformer, mamba} × seq_len {256, 512, 1024}, single × 1 rank,
      label "main", git SHA_MAIN, energy "estimate", ok.
7.    transformer-vs-mamba, transformer seq_len 256 with ``energy.source=rapl``: measured
      (source "rapl", cpu + dram components, power samples), main, SHA_MAIN, ok.
8-9.  data-parallel, transformer seq_len 512, lengths longalign, {ddp, fsdp} × 2 ranks, main,
      SHA_MAIN, estimate, ok (rank 1 waits 25 % of its window).
10-11. transformer-vs-mamba, {transformer, mamba} seq_len 512, single × 1, label "feature",
      git SHA_FEATURE, estimate, ok.
12.   data-parallel fsdp × 2, feature, SHA_FEATURE: failed on rank 1, no results.

Every ok run has 3 repeats. The two ``feature`` ok runs share their ``config_key`` with the
``main`` runs of the same model and seq_len (labels are not part of a configuration); the
feature transformer spends about 10 % more joules per token than main, the feature mamba the
same within ±1 % noise. Two-rank runs carry energy on rank 0 only (the node's CPU is read
once). Every number and run id is seeded (the same in every session); only timestamps move.
"""

from __future__ import annotations

import random
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from greenbench.aggregate import aggregate_repeat
from greenbench.energy.base import EnergyWindow, PowerSample
from greenbench.results import RankResult, RunOutcome
from greenbench.settings import identity_of
from greenbench.store import Store
from greenbench.vocabulary import config_key


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding ``slow`` tests (end to end, real processes) run first, each file's tests
    in their order: under ``-n 2`` the two processes then end on short files together rather
    than one waiting for the other's long file collected last. Tests marked ``cuda`` need a
    CUDA GPU: where torch sees none they are skipped with that reason (``pytest -m cuda``
    selects exactly them, to run on a GPU machine)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: order kept within each
    cuda = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in cuda:
        item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _threads_wait_without_spinning() -> Any:
    """OpenMP threads of the processes tests start (ranks, workers) sleep when they wait instead
    of spinning (``OMP_WAIT_POLICY=PASSIVE``; a setting of the test machine, not of greenbench,
    whose ranks keep OpenMP's default). On a busy machine two threads of one rank that spin at
    every parallel region while other processes hold the cores slow a tiny test run several
    times over (an emulated power-limit run beside two busy loops: 78 s spinning, 32 s passive);
    on a quiet machine the two are alike. A test asserts no speed, so this changes no check."""
    import os

    previous = os.environ.get("OMP_WAIT_POLICY")
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    yield
    if previous is None:
        os.environ.pop("OMP_WAIT_POLICY", None)
    else:
        os.environ["OMP_WAIT_POLICY"] = previous


@pytest.fixture(autouse=True, scope="session")
def _machine_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Machine-level caches (the CPU GEMM calibration) go to one temporary folder for the
    session, shared by the workers tests start, never to the user's ~/.cache."""
    import os

    previous = os.environ.get("GREENBENCH_CACHE_DIR")
    os.environ["GREENBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("machine-cache"))
    yield
    if previous is None:
        os.environ.pop("GREENBENCH_CACHE_DIR", None)
    else:
        os.environ["GREENBENCH_CACHE_DIR"] = previous


SHA_MAIN = "3f2c9e1b7a5d4c6e8f0a1b2c3d4e5f6a7b8c9d0e"
SHA_FEATURE = "9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c"
SEEDED_CPU = "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
IDLE_POWER_W, CARBON_G_PER_KWH, PEAK_FLOPS = 12.0, 475.0, 1.2e11

# (workload, family, seq_len, strategy, nproc, label, energy source, status, J/token factor)
SEEDED_RUNS: tuple[tuple[Any, ...], ...] = (
    *(
        ("transformer-vs-mamba", fam, seq, "single", 1, "main", "estimate", "ok", 1.0)
        for fam in ("transformer", "mamba")
        for seq in (256, 512, 1024)
    ),
    ("transformer-vs-mamba", "transformer", 256, "single", 1, "main", "rapl", "ok", 1.0),
    ("data-parallel", "transformer", 512, "ddp", 2, "main", "estimate", "ok", 1.0),
    ("data-parallel", "transformer", 512, "fsdp", 2, "main", "estimate", "ok", 1.0),
    ("transformer-vs-mamba", "transformer", 512, "single", 1, "feature", "estimate", "ok", 1.1),
    ("transformer-vs-mamba", "mamba", 512, "single", 1, "feature", "estimate", "ok", 1.0),
    ("data-parallel", "transformer", 512, "fsdp", 2, "feature", "estimate", "failed", 1.0),
)


def _ranks(rng: random.Random, run: tuple[Any, ...], repeat: int) -> list[RankResult]:
    workload, family, seq, _, nproc, _, source, _, jpt_factor = run
    # tokens/s of a tiny model on 2 CPU cores: transformer slows with seq_len, mamba barely
    tps = 2400.0 / (1 + seq / 1024) if family == "transformer" else 2000.0 / (1 + seq / 8192)
    tps *= 1 + rng.uniform(-0.01, 0.01)
    steps, tokens = 4, 8 * seq * 4 // nproc
    ranks = []
    for rank in range(nproc):
        seconds = tokens * nproc / tps
        wait_s = seconds * (0.25 if workload == "data-parallel" and rank == 1 else 0.05)
        step_times = tuple(seconds / steps * (1 + rng.uniform(-0.05, 0.05)) for _ in range(steps))
        energy = None
        if rank == 0:
            power_w = 45.0 * jpt_factor * (1 + rng.uniform(-0.01, 0.01))
            samples = tuple(
                PowerSample(t_s=0.25 * i, power_w=power_w + (-1) ** i, component=c)
                for c in ("cpu0", "dram0")
                for i in range(int(seconds / 0.25))
            )
            energy = EnergyWindow(
                source=source,
                measured=source != "estimate",
                seconds=seconds,
                energy_j=power_w * seconds,
                energy_cpu_j=(0.85 if source == "rapl" else 1.0) * power_w * seconds,
                energy_dram_j=0.15 * power_w * seconds if source == "rapl" else None,
                samples=samples if source == "rapl" else (),
                note="" if source == "rapl" else "TDP × utilisation model (CodeCarbon)",
            )
        ranks.append(
            RankResult(
                rank=rank,
                local_rank=rank,
                host="bench-01",
                repeat=repeat,
                tokens=tokens,
                seconds=seconds,
                compute_s=seconds * 0.9 - wait_s,
                comm_s=seconds * 0.1,
                wait_s=wait_s,
                step_times_s=step_times,
                peak_mem_bytes=int(2e8 * (1 + seq / 1024)),
                flops=6 * 5e6 * tokens,
                loss=10.4 - 0.3 * repeat + rng.uniform(-0.05, 0.05),
                n_microbatches=2,
                energy=energy,
            )
        )
    return ranks


def seed_database(path: Path) -> Path:
    """Write the ``SEEDED_RUNS`` (see the module docstring) into a new database at ``path``."""
    rng = random.Random(20260105)
    start = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(hours=len(SEEDED_RUNS))
    with Store(path) as store:
        for i, run in enumerate(SEEDED_RUNS):
            workload, family, seq, strategy, nproc, label, source, status, _ = run
            sha = SHA_MAIN if label == "main" else SHA_FEATURE
            lengths = "longalign" if workload == "data-parallel" else "fixed"
            settings = {
                "model.family": family, "model.size": "tiny", "data.seq_len": seq,
                "data.lengths": lengths, "strategy": strategy, "nproc": nproc, "nnodes": 1,
                "device": "cpu", "precision": "fp32", "repeats": 3, "seed": 0,
                "energy.source": "auto" if source == "estimate" else source,
                "energy.region": "world",
            }  # fmt: skip
            run_id = f"{i + 1:04x}{rng.getrandbits(32):08x}"
            store.begin_run({
                "run_id": run_id, "suite": "seeded", "workload": workload,
                "config_key": config_key(identity_of(settings, workload)),
                "config_name": f"{family}/tiny seq={seq} {lengths} {strategy}×{nproc}",
                "config": {"workload": workload, "suite": "seeded", "label": label,
                           "settings": settings},
                "model_family": family, "model_size": "tiny", "strategy": strategy,
                "layout": f"dp{nproc}", "device": "cpu", "device_type": f"cpu:{SEEDED_CPU}",
                "nproc": nproc, "nnodes": 1, "precision": "fp32", "seq_len": seq,
                "lengths": lengths, "energy_source": source,
                "energy_measured": source != "estimate", "region": "world",
                "carbon_intensity_g_per_kwh": CARBON_G_PER_KWH, "label": label, "git_sha": sha,
                "started_at": start + timedelta(hours=i), "host": "bench-01",
                "hardware": {"cpu_model": SEEDED_CPU, "logical_cores": 2, "gpus": []},
                "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "greenbench": "0.1.0"},
            })  # fmt: skip
            if status == "failed":
                outcome = RunOutcome(
                    status="failed", error="rank 1: RuntimeError: gloo timeout", failed_rank=1
                )
            else:
                ranks = [r for k in range(3) for r in _ranks(rng, run, k)]
                repeats = [
                    aggregate_repeat(
                        [r for r in ranks if r.repeat == k],
                        idle_power_w=IDLE_POWER_W,
                        peak_flops=PEAK_FLOPS,
                        n_devices=nproc,
                        carbon_g_per_kwh=CARBON_G_PER_KWH,
                    )
                    for k in range(3)
                ]
                outcome = RunOutcome(
                    status="ok",
                    repeats=repeats,
                    ranks=ranks,
                    peak_flops=PEAK_FLOPS,
                    peak_flops_source="cpu-gemm-calibration",
                )
            store.finish_run(run_id, outcome)
    return path


@pytest.fixture(scope="session")
def _seeded_db_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seed_database(tmp_path_factory.mktemp("seeded") / "greenbench.duckdb")


@pytest.fixture
def seeded_db(_seeded_db_template: Path, tmp_path: Path) -> Path:
    """A private copy (safe to write to) of the seeded database described in this module."""
    path = tmp_path / "greenbench.duckdb"
    shutil.copyfile(_seeded_db_template, path)
    return path
