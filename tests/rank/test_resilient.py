"""Fault-tolerant runs end to end: a rank SIGKILLed mid-run, torchrun's restart, the resume from
the last checkpoint, and the run stored once with its failure; the restarted run's final
parameters equal an uninterrupted run's of the same seed, bit for bit (fp32 on CPU, the data a
function of the step: every operation repeats exactly, so the tolerance is 0).

Every test launches real worker processes (torchrun, gloo ranks)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import QUICK

from greenbench.launcher.launch import run_specs
from greenbench.spec import expand
from greenbench.store import read_frame

pytestmark = pytest.mark.slow

STEPS = {"train.steps": 6, "ckpt.every": 2, "timeout_s": 240}


DDP = {"strategy": "ddp", "nproc": 2}


def specs(folder: Path, layout: dict, fault: str, name: str, **more):
    """One run of the configuration (killed when ``fault`` names a rank), saving its final
    parameters as ``folder/name.pt``."""
    settings = {
        **QUICK, **STEPS, **layout, **more,
        "fault.kill_rank": fault, "debug.save_final": str(folder / f"{name}.pt"),
    }  # fmt: skip
    return expand("transformer-vs-mamba", [settings])


def run_all(folder: Path, runs: list) -> Path:
    db = folder / "r.duckdb"
    summary = run_specs(runs, db)
    assert summary.failed == 0, summary
    return db


def run_pair(tmp_path: Path, layout: dict, kill: str, whole: Path | None = None, **more):
    """The killed run and, unless ``whole`` (a folder holding it) is given, an uninterrupted one
    of the same configuration; returns (killed's database, uninterrupted's folder)."""
    runs = specs(tmp_path, layout, kill, "killed", **more)
    if whole is None:
        runs += specs(tmp_path, layout, "", "whole", **more)
    return run_all(tmp_path, runs), whole or tmp_path


@pytest.fixture(scope="module")
def whole_ddp(tmp_path_factory) -> Path:
    """The uninterrupted ddp run, once per module: checkpointing synchronously or asynchronously
    does not change what a run trains, so it is the reference of the killed synchronous and the
    killed asynchronous ddp run alike (and the asynchronous one is held to a synchronous run)."""
    folder = tmp_path_factory.mktemp("whole-ddp")
    run_all(folder, specs(folder, DDP, "", "whole"))
    return folder


def same_parameters(tmp_path: Path, whole_folder: Path) -> None:
    killed = torch.load(tmp_path / "killed.pt")
    whole = torch.load(whole_folder / "whole.pt")
    assert killed.keys() == whole.keys() and killed
    for name, tensor in whole.items():
        assert torch.equal(killed[name], tensor), name


def results(db: Path):
    return read_frame(
        db,
        "SELECT r.run_id, status, failures, tokens, tokens_trained, goodput, redone_s, "
        "restart_s, energy_lost_j, ckpt_count FROM results r JOIN runs USING (run_id) "
        "ORDER BY runs.started_at",
    )


@pytest.mark.parametrize(
    "layout, kill",
    [
        ({"strategy": "single", "nproc": 1}, "0@3"),
        (DDP, "1@3"),
        ({"strategy": "fsdp", "nproc": 2}, "1@3"),
        ({"strategy": "hybrid", "layout": "tp2"}, "1@3"),
    ],
    ids=["single", "ddp", "fsdp", "hybrid-tp2"],
)
def test_a_killed_run_restarts_and_ends_as_an_uninterrupted_one(request, tmp_path, layout, kill):
    shared = request.getfixturevalue("whole_ddp") if layout is DDP else None
    db, whole_folder = run_pair(tmp_path, layout, kill, shared)
    killed_and_whole = results(db)
    if shared is not None:
        killed_and_whole = pd.concat([killed_and_whole, results(shared / "r.duckdb")])
    assert list(killed_and_whole.status) == ["ok", "ok"]
    killed, whole = killed_and_whole.iloc[0], killed_and_whole.iloc[1]
    assert killed.failures == 1 and whole.failures == 0
    # checkpoints after steps 2 and 4 (none after the last step); killed at step 3: step 2
    # trained twice
    assert killed.ckpt_count == 2 and whole.ckpt_count == 2
    assert killed.tokens == whole.tokens
    assert killed.tokens_trained == killed.tokens * 7 // 6
    assert killed.goodput == pytest.approx(6 / 7)
    assert whole.goodput == 1.0 and whole.redone_s == 0.0 and whole.restart_s == 0.0
    assert killed.redone_s > 0 and killed.restart_s > 0
    events = read_frame(
        db,
        "SELECT kind, step, rank FROM run_events WHERE run_id = ? ORDER BY seq",
        [killed.run_id],
    )
    assert list(events.kind) == ["checkpoint", "failure", "redone", "restart", "load", "checkpoint"]
    failure = events[events.kind == "failure"].iloc[0]
    assert (failure["step"], failure["rank"]) == (3, int(kill.split("@")[0]))
    assert list(events[events.kind == "load"].step) == [2]
    same_parameters(tmp_path, whole_folder)


def test_an_asynchronous_checkpoint_restores_the_same_run(tmp_path, whole_ddp):
    db, _ = run_pair(tmp_path, DDP, "1@5", whole_ddp, **{"ckpt.mode": "async"})
    events = read_frame(db, "SELECT kind, step, bytes, note FROM run_events ORDER BY seq")
    (loaded,) = events[events.kind == "load"].step
    saves = events[events.kind == "checkpoint"]
    assert saves.note.str.contains("async").all()
    # the save after step 4 is still being written when rank 1 dies one step later, or done:
    # a restart loads the newest complete one
    cut_short = saves[saves.note.str.contains("never completed")]
    assert loaded == (2 if len(cut_short) else 4)
    assert list(cut_short.step) in ([], [4])
    same_parameters(tmp_path, whole_ddp)


def test_a_kill_before_the_first_checkpoint_starts_over(tmp_path):
    db = tmp_path / "r.duckdb"
    settings = {**QUICK, "strategy": "ddp", "nproc": 2, "train.steps": 4,
                "fault.kill_rank": "0@1"}  # fmt: skip
    assert run_specs(expand("transformer-vs-mamba", [settings]), db).failed == 0
    (row,) = read_frame(db, "SELECT failures, goodput, ckpt_count FROM results").itertuples()
    assert row.failures == 1 and row.ckpt_count == 0 and row.goodput == pytest.approx(4 / 5)
    events = read_frame(db, "SELECT kind, note FROM run_events ORDER BY seq")
    assert list(events.kind) == ["failure", "redone", "restart"]
    assert "from scratch" in events.note.iloc[2]


def test_an_unwritable_checkpoint_folder_fails_its_run_only(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    db = tmp_path / "r.duckdb"
    bad = {**QUICK, **STEPS, "strategy": "single", "nproc": 1, "ckpt.dir": str(blocker)}
    good = {**QUICK, "strategy": "single", "nproc": 1}
    summary = run_specs(expand("transformer-vs-mamba", [bad]) + expand(
        "transformer-vs-mamba", [good]
    ), db)  # fmt: skip
    runs = read_frame(db, "SELECT status, error FROM runs ORDER BY started_at")
    assert list(runs.status) == ["failed", "ok"] and summary.failed == 1
    assert "cannot be written" in runs.error.iloc[0] and str(blocker) in runs.error.iloc[0]


@pytest.fixture
def full_disk(tmp_path):
    """A 256 KiB tmpfs: a checkpoint of the tiny model (megabytes) cannot fit."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_checkpoint_folder_fails_the_run_with_the_reason(tmp_path, full_disk):
    db = tmp_path / "r.duckdb"
    bad = {**QUICK, **STEPS, "strategy": "single", "nproc": 1, "ckpt.dir": str(full_disk),
           "fault.max_restarts": 0}  # fmt: skip
    good = {**QUICK, "strategy": "single", "nproc": 1}
    specs_ = expand("transformer-vs-mamba", [bad]) + expand("transformer-vs-mamba", [good])
    run_specs(specs_, db)
    runs = read_frame(db, "SELECT status, error FROM runs ORDER BY started_at")
    assert list(runs.status) == ["failed", "ok"]
    assert "No space left on device" in runs.error.iloc[0]
