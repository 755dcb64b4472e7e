"""Runs to a target loss for the tests of their views: described once (`TargetRun`), as the
repeat rows the views' pure functions take (`as_rows`) and as a database written by the real
Store (`write_db`). Importable from any test (``pythonpath`` in pyproject).

Each repeat's rank carries its `TargetOutcome` (and validation curve), which the real
aggregation and Store turn into the stored figures to target, as a run to a target's are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from greenbench.aggregate import aggregate_repeat
from greenbench.energy.base import EnergyWindow
from greenbench.results import RankResult, RunOutcome, TargetOutcome, ValPoint
from greenbench.settings import identity_of, seed_group_of
from greenbench.vocabulary import config_key

T0 = datetime(2026, 3, 2, 9, 0, 0)
DEVICE = "cpu:test"
#: the settings every test run shares (a run to a target on one fixed chain)
BASE = {
    "model.family": "transformer", "model.size": "tiny", "strategy": "single", "nproc": 1,
    "nnodes": 1, "data.seq_len": 128, "data.lengths": "fixed", "data.chain_seed": 0,
    "train.until": "target", "target.gap_closed": 0.6, "repeats": 1,
}  # fmt: skip
TARGET = 4.0


@dataclass
class TargetRun:
    """One run (one seed) to a target: per repeat ``(reached, seconds, joules, best loss)``;
    where it did not reach, seconds and joules are what it spent before its budget ended it.
    ``curve``: (step, val_loss) of every repeat (seconds and joules grow with the step)."""

    run_id: str
    settings: dict[str, Any]
    repeats: list[tuple[bool, float, float, float]]
    workload: str = "convergence"
    source: str = "rapl"
    measured: bool = True
    curve: list[tuple[int, float]] = field(default_factory=list)
    steps_per_s: float = 10.0
    target: float = TARGET

    @property
    def all_settings(self) -> dict[str, Any]:
        return BASE | self.settings

    @property
    def name(self) -> str:
        s = self.all_settings
        strategy = s["strategy"]
        if strategy == "skippipe":
            skip = f" skip={s['skippipe.skip']:g}" if s["skippipe.schedule"] == "skippipe" else ""
            strategy = f"skippipe[{s['skippipe.schedule']} 1-2-1{skip}]"
        return (
            f"{s['model.family']}/{s['model.size']} seq={s['data.seq_len']} "
            f"{s['data.lengths']} {strategy}×{s['nproc']}"
        )

    @property
    def identity(self) -> dict[str, Any]:
        return identity_of(self.all_settings, self.workload)

    @property
    def seed_group(self) -> str:
        return seed_group_of(self.identity)


def _figures(run: TargetRun, reached: bool, seconds: float, joules: float, best: float) -> dict:
    steps = round(seconds * run.steps_per_s)
    return {
        "target_loss": run.target,
        "target_reached": reached,
        "steps_to_target": steps if reached else None,
        "tokens_to_target": steps * 1024 if reached else None,
        "seconds_to_target": seconds if reached else None,
        "energy_to_target_j": joules if reached else None,
        "energy_to_target_net_j": joules * 0.6 if reached else None,
        "best_val_loss": run.target - 0.01 if reached else best,
        "eval_s": 0.25,
        "eval_energy_j": 1.5,
    }


def as_rows(runs: list[TargetRun]) -> pd.DataFrame:
    """The repeat rows `greenbench.reporting.target_rows.target_rows` would read of ``runs``."""
    out = []
    for i, run in enumerate(runs):
        s = run.all_settings
        for k, (reached, seconds, joules, best) in enumerate(run.repeats):
            out.append(
                {
                    "run_id": run.run_id, "config_key": config_key(run.identity),
                    "config_name": run.name,
                    "config": json.dumps({"workload": run.workload, "settings": s}),
                    "workload": run.workload, "suite": "convergence", "strategy": s["strategy"],
                    "model_family": s["model.family"], "model_size": s["model.size"],
                    "nproc": s["nproc"], "nnodes": 1, "device_type": DEVICE,
                    "precision": "fp32", "seq_len": s["data.seq_len"], "lengths": "fixed",
                    "git_sha": "abc", "started_at": T0 + timedelta(minutes=i),
                    "contended": False, "simulated": False, "seed_group": run.seed_group,
                    "repeat": k, "energy_source": run.source, "energy_measured": run.measured,
                    **_figures(run, reached, seconds, joules, best),
                }
            )  # fmt: skip
    return pd.DataFrame(out)


def curve_rows(runs: list[TargetRun]) -> pd.DataFrame:
    """The validation curves (`target_rows.CURVE_COLUMNS`) of ``runs``, every repeat's."""
    out = [
        {"run_id": run.run_id, "repeat": k, "step": step, "tokens": step * 1024,
         "seconds": step / run.steps_per_s, "joules": step / run.steps_per_s * 50.0,
         "val_loss": loss}
        for run in runs
        for k in range(len(run.repeats))
        for step, loss in run.curve
    ]  # fmt: skip
    columns = ["run_id", "repeat", "step", "tokens", "seconds", "joules", "val_loss"]
    return pd.DataFrame(out, columns=columns)


def _rank(run: TargetRun, k: int) -> RankResult:
    """Repeat ``k``'s one rank, its window and its outcome to the target (`TargetOutcome`)."""
    reached, seconds, joules, best = run.repeats[k]
    figures = _figures(run, reached, seconds, joules, best)
    steps = round(seconds * run.steps_per_s)
    curve = tuple(
        ValPoint(step, step * 1024, step / run.steps_per_s, step / run.steps_per_s * 50.0, loss)
        for step, loss in run.curve
    )
    outcome = TargetOutcome(
        target_loss=run.target, reached=reached, steps=steps, tokens=steps * 1024,
        best_val_loss=figures["best_val_loss"], eval_s=figures["eval_s"],
        eval_energy_j=figures["eval_energy_j"],
        stopped_by="reached" if reached else "max_steps", curve=curve,
    )  # fmt: skip
    return RankResult(
        rank=0, local_rank=0, host="h", repeat=k, tokens=steps * 1024, seconds=seconds,
        compute_s=seconds, comm_s=0.0, wait_s=0.0, step_times_s=(0.1, 0.1), peak_mem_bytes=1,
        flops=1.0, loss=4.5, n_microbatches=1,
        energy=EnergyWindow(run.source, run.measured, seconds, joules, energy_cpu_j=joules),
        target=outcome,
    )  # fmt: skip


def write_db(db: Path, runs: list[TargetRun]) -> Path:
    """``runs`` written by the real Store, each repeat's figures to target, its validation
    curve and its run's seed group aggregated and stored as a run to a target's are."""
    from greenbench.store import Store

    with Store(db) as store:
        for i, run in enumerate(runs):
            s = run.all_settings
            store.begin_run({
                "run_id": run.run_id, "workload": run.workload, "suite": "convergence",
                "config_name": run.name, "config_key": config_key(run.identity),
                "seed_group": run.seed_group,
                "config": {"workload": run.workload, "settings": s},
                "model_family": s["model.family"], "model_size": s["model.size"],
                "strategy": s["strategy"], "layout": f"dp{s['nproc']}", "device": "cpu",
                "device_type": DEVICE, "nproc": s["nproc"], "nnodes": 1, "precision": "fp32",
                "seq_len": s["data.seq_len"], "lengths": "fixed",
                "started_at": T0 + timedelta(minutes=i),
            })  # fmt: skip
            ranks = [_rank(run, k) for k in range(len(run.repeats))]
            repeats = [
                # idle at 0.4 of the window's mean power: net energy 0.6 of gross (`_figures`)
                aggregate_repeat([r], idle_power_w=0.4 * joules / seconds, peak_flops=None,
                                 n_devices=1, carbon_g_per_kwh=None)
                for r, (_, seconds, joules, _) in zip(ranks, run.repeats, strict=True)
            ]  # fmt: skip
            store.finish_run(run.run_id, RunOutcome(status="ok", repeats=repeats, ranks=ranks))
    return db


# ------------------------------------------------------------------------------ scenarios


def seeds(run_id: str, settings: dict[str, Any], per_seed: list[tuple], **kw: Any) -> list:
    """One `TargetRun` per seed: ``per_seed[i]`` is seed i's one repeat ``(reached, seconds,
    joules, best)``."""
    return [
        TargetRun(f"{run_id}{i}", settings | {"seed": i}, [rep], **kw)
        for i, rep in enumerate(per_seed)
    ]


def skippipe_runs(skip: list[tuple], aware: list[tuple]) -> list[TargetRun]:
    """SkipPipe (skip 0.5) and the straggler-aware full pipeline, one straggler, per seed."""
    sp = {
        "strategy": "skippipe", "nproc": 4, "skippipe.stages": "1-2-1", "skippipe.skip": 0.5,
        "emulate.slow_nodes": "2", "emulate.slowdown": 3.0,
    }  # fmt: skip
    return [
        *seeds("skip", sp | {"skippipe.schedule": "skippipe"}, skip),
        *seeds("aware", sp | {"skippipe.schedule": "full-aware"}, aware),
    ]


FAST = [(True, 10.0, 100.0, 0), (True, 12.0, 120.0, 0)]
SLOW = [(True, 20.0, 200.0, 0), (True, 24.0, 240.0, 0)]
NEVER = [(False, 60.0, 600.0, 4.123), (False, 60.0, 600.0, 4.3)]
CURVE = [(0, 5.5), (10, 4.8), (20, 4.1), (30, 3.95)]


def convergence_runs() -> list[TargetRun]:
    """Families on one rank (one never reaching), SkipPipe cheaper than its baseline, and
    DDP/FSDP/ODC agreeing to rounding, two seeds each."""
    dp = [
        TargetRun(f"{s}{seed}", {"strategy": s, "nproc": 2, "seed": seed},
                  [(True, 15.0, 150.0, 0)], curve=[(st, v + k * 1e-7) for st, v in CURVE])
        for k, s in enumerate(("ddp", "fsdp", "odc"))
        for seed in (0, 1)
    ]  # fmt: skip
    return [
        *seeds("t", {}, FAST),
        *seeds("m", {"model.family": "mamba"}, SLOW),
        *seeds("n", {"model.family": "mamba2"}, NEVER),
        *skippipe_runs(FAST, SLOW),
        *dp,
    ]
