"""Fault-tolerant runs for the tests of their views: the fault-tolerance workload's DDP runs at
two ranks, one per checkpoint interval and seed, each with one failure injected after 15 of its
16 measured steps, their fault figures and events written by the real Store. Importable from
any test (``pythonpath`` in pyproject).

Every figure follows from a few constants so a test can compute what to expect by hand: a step
takes `STEP_S`, a checkpoint `DELTA_S`, a restart `RESTART_S`, the ranks draw `POWER_W`
together (an estimate); checkpointing every E steps, the failure after `KILL_AT` steps redoes
``KILL_AT mod E`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from greenbench.aggregate import aggregate_repeat
from greenbench.config import setting_of
from greenbench.energy.base import EnergyWindow
from greenbench.results import RankResult, RunEvent, RunOutcome
from greenbench.settings import identity_of, seed_group_of
from greenbench.settings.fault import CkptSettings, FaultSettings
from greenbench.vocabulary import config_key

EVERY = setting_of(CkptSettings, "every").key
KILL = setting_of(FaultSettings, "kill_rank").key
WORKLOAD = "fault-tolerance"
STEPS, KILL_AT = 16, 15
TOKENS_PER_STEP = 1024
STEP_S, DELTA_S, RESTART_S, POWER_W = 0.1, 0.05, 6.0, 40.0
RESTART_NOTE = "the seconds between the killed ranks' exit and the new ranks' meters are unmetered"
T0 = datetime(2026, 4, 1, 9, 0, 0)
BASE = {
    "model.family": "transformer", "model.size": "tiny", "strategy": "ddp", "nproc": 2,
    "nnodes": 1, "data.seq_len": 128, "data.lengths": "fixed", "train.steps": STEPS,
    "train.min_window_s": 0.0, "repeats": 1, KILL: f"1@{KILL_AT}",
}  # fmt: skip


@dataclass
class FaultRun:
    """One run: checkpointed every ``every`` steps, seed ``seed``; its steps take ``scale`` ×
    `STEP_S` (and its checkpoints and restart as much longer), so seeds differ."""

    run_id: str
    every: int
    seed: int = 0
    scale: float = 1.0
    failures: int = 1

    @property
    def settings(self) -> dict[str, object]:
        return BASE | {EVERY: self.every, "seed": self.seed}

    @property
    def checkpoints(self) -> int:
        done = KILL_AT // self.every  # before the failure
        again = STEPS // self.every - done  # after the restart
        return done + again

    @property
    def redone_steps(self) -> int:
        return (KILL_AT % self.every) * self.failures

    def figures(self) -> dict[str, float]:
        step, delta, restart = STEP_S * self.scale, DELTA_S * self.scale, RESTART_S * self.scale
        ckpt_s = self.checkpoints * delta
        redone_s = self.redone_steps * step
        restart_s = restart * self.failures
        return {
            "seconds": STEPS * step + ckpt_s + redone_s + restart_s,
            "ckpt_s": ckpt_s, "redone_s": redone_s, "restart_s": restart_s,
        }  # fmt: skip


def _rank(rank: int, seconds: float) -> RankResult:
    return RankResult(
        rank=rank, local_rank=rank, host="h", repeat=0, tokens=STEPS * TOKENS_PER_STEP // 2,
        seconds=seconds, compute_s=seconds, comm_s=0.0, wait_s=0.0,
        step_times_s=(STEP_S,) * STEPS, peak_mem_bytes=1, flops=1.0, loss=4.5,
        n_microbatches=1,
        energy=EnergyWindow("estimate", False, seconds, POWER_W / 2 * seconds,
                            energy_cpu_j=POWER_W / 2 * seconds),
    )  # fmt: skip


def events_of(run: FaultRun) -> list[RunEvent]:
    """Its checkpoints before the failure, the failure, the restart with its load, the work
    redone and the checkpoints after."""
    f = run.figures()
    delta = f["ckpt_s"] / run.checkpoints
    out = [
        RunEvent(0, "checkpoint", step=k, t_s=k * STEP_S, seconds=delta, joules=POWER_W * delta,
                 bytes=1000)
        for k in range(run.every, KILL_AT + 1, run.every)
    ]  # fmt: skip
    last = (KILL_AT // run.every) * run.every
    out += [
        RunEvent(0, "failure", step=KILL_AT, rank=1, t_s=KILL_AT * STEP_S),
        RunEvent(0, "restart", step=last, seconds=f["restart_s"],
                 joules=POWER_W * f["restart_s"], note=RESTART_NOTE),
        RunEvent(0, "load", step=last, seconds=0.01, bytes=1000),
        RunEvent(0, "redone", step=KILL_AT, seconds=f["redone_s"],
                 joules=POWER_W * f["redone_s"],
                 tokens=run.redone_steps * TOKENS_PER_STEP),
    ]  # fmt: skip
    out += [
        RunEvent(0, "checkpoint", step=k, seconds=delta, joules=POWER_W * delta, bytes=1000)
        for k in range(last + run.every, STEPS + 1, run.every)
    ]
    return out


def write_fault_runs(db: Path, runs: list[FaultRun], plain: bool = True) -> Path:
    """``runs`` by the real Store, and (``plain``) one DDP run of the same workload without
    fault figures, which is not a fault-tolerant run."""
    from greenbench.store import Store

    with Store(db) as store:
        for i, run in enumerate(runs):
            f = run.figures()
            identity = identity_of(run.settings, WORKLOAD)
            store.begin_run({
                "run_id": run.run_id, "workload": WORKLOAD, "suite": WORKLOAD,
                "config_name": "transformer/tiny seq=128 fixed ddp×2",
                "config_key": config_key(identity), "seed_group": seed_group_of(identity),
                "config": {"workload": WORKLOAD, "settings": run.settings},
                "model_family": "transformer", "model_size": "tiny", "strategy": "ddp",
                "layout": "dp2", "device": "cpu", "device_type": "cpu:test", "nproc": 2,
                "nnodes": 1, "precision": "fp32", "seq_len": 128, "lengths": "fixed",
                "started_at": T0 + timedelta(minutes=i),
            })  # fmt: skip
            ranks = [_rank(r, f["seconds"]) for r in range(2)]
            repeat = aggregate_repeat(ranks, idle_power_w=None, peak_flops=None, n_devices=2,
                                      carbon_g_per_kwh=None)  # fmt: skip
            tokens = STEPS * TOKENS_PER_STEP
            trained = tokens + run.redone_steps * TOKENS_PER_STEP
            repeat = replace(
                repeat, failures=run.failures, tokens_trained=trained, goodput=tokens / trained,
                redone_s=f["redone_s"], redone_j=POWER_W * f["redone_s"],
                restart_s=f["restart_s"], restart_j=POWER_W * f["restart_s"],
                energy_lost_j=POWER_W * (f["redone_s"] + f["restart_s"]),
                ckpt_count=run.checkpoints, ckpt_s=f["ckpt_s"], ckpt_j=POWER_W * f["ckpt_s"],
                ckpt_bytes=1000 * run.checkpoints,
            )  # fmt: skip
            store.finish_run(run.run_id, RunOutcome(status="ok", repeats=[repeat], ranks=ranks,
                                                    events=events_of(run)))  # fmt: skip
        if plain:
            settings = {k: v for k, v in BASE.items() if k != KILL}
            identity = identity_of(settings, WORKLOAD)
            store.begin_run({
                "run_id": "plain", "workload": WORKLOAD, "suite": WORKLOAD,
                "config_name": "plain", "config_key": config_key(identity),
                "config": {"workload": WORKLOAD, "settings": settings},
                "model_family": "transformer", "model_size": "tiny", "strategy": "ddp",
                "layout": "dp2", "device": "cpu", "device_type": "cpu:test", "nproc": 2,
                "nnodes": 1, "precision": "fp32", "seq_len": 128, "lengths": "fixed",
                "started_at": T0,
            })  # fmt: skip
            ranks = [_rank(r, STEPS * STEP_S) for r in range(2)]
            repeat = aggregate_repeat(ranks, idle_power_w=None, peak_flops=None, n_devices=2,
                                      carbon_g_per_kwh=None)  # fmt: skip
            store.finish_run("plain", RunOutcome(status="ok", repeats=[repeat], ranks=ranks))
    return db


#: one run per interval, every 2, 4 and 8 steps
ONE_EACH = [FaultRun(f"e{e}", e) for e in (2, 4, 8)]
#: two seeds per interval, the second's steps 2 % slower
TWO_SEEDS = [FaultRun(f"e{e}s{s}", e, seed=s, scale=1 + 0.02 * s) for e in (2, 4, 8)
             for s in (0, 1)]  # fmt: skip
