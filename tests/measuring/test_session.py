"""``greenbench.measure`` around one's own loop: warm-up steps left out, one run with a row per
rank, MFU only from FLOPs the user gave (and labelled so); under torchrun (two real gloo
processes) the ranks are gathered on rank 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import torch

import greenbench
from greenbench.errors import SpecError
from greenbench.measuring.record import LOOP_STRATEGY
from greenbench.user import FLOPS_GIVEN

ROOT = Path(__file__).resolve().parents[2]


def rows(db: Path, sql: str) -> list[dict]:
    with duckdb.connect(str(db), read_only=True) as con:
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def train(steps: int, m: object | None, tokens: int = 100) -> None:
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        model(torch.randn(16, 8)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if m is not None:
            m.step(tokens=tokens, loss=1.0)


def test_a_loop_is_stored_as_one_run_without_its_warm_up(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    with greenbench.measure(
        "tiny", label="x", db=db, warmup_steps=2, flops_per_token=10.0, settings={"batch": 16}
    ) as m:
        train(5, m)
    (run,) = rows(db, "SELECT * FROM runs")
    assert run["run_id"] == m.run_id and run["status"] == "ok" and run["label"] == "x"
    assert run["workload"] == "loop/tiny" and run["strategy"] == LOOP_STRATEGY
    assert json.loads(run["config"])["settings"]["user.batch"] == 16
    (result,) = rows(db, "SELECT * FROM results")
    assert result["tokens"] == 300 and result["flops"] == 3000.0  # 3 of 5 steps measured
    assert len(json.loads(result["step_times_s"])) == 3
    assert result["energy_source"] == "estimate" and not result["energy_measured"]
    assert result["mfu_note"].startswith(FLOPS_GIVEN) and result["loss"] == 1.0


def test_nothing_measured_nothing_stored_and_a_failing_loop_is_failed(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    with pytest.raises(SpecError, match="all warm-up"):
        with greenbench.measure("short", db=db, warmup_steps=3) as m:
            train(3, m)
    assert not db.exists()
    with pytest.raises(RuntimeError, match="boom"):
        with greenbench.measure("bad", db=db) as m:
            train(2, m)
            raise RuntimeError("boom")
    (run,) = rows(db, "SELECT status, error FROM runs")
    assert run == {"status": "failed", "error": "RuntimeError: boom"}
    with pytest.raises(SpecError, match="tokens"):
        with greenbench.measure("neg", db=db) as m:
            m.step(tokens=-1)


@pytest.mark.slow
def test_two_torchrun_ranks_store_one_run_with_a_row_each(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    env = os.environ | {"PYTHONPATH": str(ROOT / "examples" / "tinylm"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "tinylm.train", "--steps", "6", "--rows", "2", "--db", str(db), "--label", "ddp"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run,) = rows(db, "SELECT * FROM runs")
    assert (run["workload"], run["nproc"], run["status"]) == ("loop/tinylm-train", 2, "ok")
    ranks = rows(db, "SELECT * FROM rank_results ORDER BY rank")
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["tokens"] == 4 * 2 * 128 for r in ranks)  # 4 measured steps of 2 rows each
    # the node's CPU is read once, by local rank 0; rank 1 carries no energy of its own
    assert ranks[0]["energy_j"] > 0 and ranks[1]["energy_j"] == 0
    (result,) = rows(db, "SELECT tokens, joules_per_token FROM results")
    assert result["tokens"] == 2 * 4 * 2 * 128 and result["joules_per_token"] > 0


@pytest.mark.parametrize(
    ("argument", "bad"),
    [
        ("flops", -1e12),
        ("flops", float("nan")),
        ("flops", float("inf")),
        ("flops", "many"),
        ("tokens", -1),
        ("tokens", 2.5),
        ("tokens", float("nan")),
        ("tokens", True),
    ],
)
def test_a_bad_step_figure_is_a_value_error_naming_it_and_nothing_is_counted(
    tmp_path: Path, argument: str, bad: object
):
    db = tmp_path / "r.duckdb"
    with greenbench.measure("bad-step", db=db, warmup_steps=0) as m:
        m.step(tokens=10, flops=1000.0)
        good = {"tokens": 10, "flops": 1000.0}
        with pytest.raises(ValueError, match=rf"m\.step\({argument}=") as raised:
            m.step(**(good | {argument: bad}))
        assert isinstance(raised.value, SpecError)  # greenbench's bad input too (exit 2)
        m.step(tokens=10, flops=1000.0)
    (result,) = rows(db, "SELECT tokens, flops, mfu FROM results")
    assert result["tokens"] == 20 and result["flops"] == 2000.0 and result["mfu"] > 0


def test_integer_like_tokens_and_scalar_flops_are_taken(tmp_path: Path):
    import numpy as np

    db = tmp_path / "r.duckdb"
    with greenbench.measure("ints", db=db, warmup_steps=0) as m:
        m.step(tokens=np.int64(7), flops=np.float32(70.0))
        m.step(tokens=torch.tensor(5), flops=torch.tensor(50.0))
    (result,) = rows(db, "SELECT tokens, flops FROM results")
    assert result["tokens"] == 12 and result["flops"] == 120.0


@pytest.mark.parametrize(
    ("argument", "bad", "problem"),
    [
        ("precision", "fp3", "precision must be one of auto, fp32, bf16"),
        ("flops_per_token", float("inf"), "flops_per_token must be a finite number > 0"),
        ("flops_per_token", float("nan"), "flops_per_token must be a finite number > 0"),
        ("flops_per_token", -5.0, "flops_per_token must be a finite number > 0"),
        ("idle_s", float("inf"), "idle_s must be"),
        ("energy_source", "rapll", "energy_source must be one of auto, nvml"),
    ],
)
def test_a_bad_argument_is_refused_at_construction(
    tmp_path: Path, argument: str, bad: object, problem: str
):
    db = tmp_path / "r.duckdb"
    with pytest.raises(ValueError, match=problem):
        greenbench.measure("x", db=db, **{argument: bad})
    assert not db.exists()


def test_one_measure_object_measures_each_with_block_as_its_own_run(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    m = greenbench.measure("again", label="twice", db=db, warmup_steps=1, flops_per_token=10.0)
    with m:
        train(3, m, tokens=100)
    first = m.run_id
    with m:
        train(4, m, tokens=50)
    second = m.run_id
    assert first and second and first != second
    runs = rows(db, "SELECT run_id, label, status, config_key FROM runs ORDER BY started_at")
    assert [(r["run_id"], r["label"], r["status"]) for r in runs] == [
        (first, "twice", "ok"),
        (second, "twice", "ok"),
    ]
    assert runs[0]["config_key"] == runs[1]["config_key"]  # the same configuration, twice
    by_run = {
        r["run_id"]: r for r in rows(db, "SELECT run_id, tokens, flops, step_times_s FROM results")
    }
    # each block has its own warm-up step and counts only its own steps
    assert (by_run[first]["tokens"], by_run[first]["flops"]) == (200, 2000.0)
    assert (by_run[second]["tokens"], by_run[second]["flops"]) == (150, 1500.0)
    assert len(json.loads(by_run[second]["step_times_s"])) == 3


def test_a_step_outside_the_block_or_a_nested_block_is_refused(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    m = greenbench.measure("misuse", db=db, warmup_steps=0)
    with pytest.raises(RuntimeError, match=r"m\.step\(\) outside"):
        m.step(tokens=1)
    with m:
        m.step(tokens=1)
        with pytest.raises(RuntimeError, match="already measuring"):
            m.__enter__()
        m.step(tokens=1)
    (result,) = rows(db, "SELECT tokens FROM results")
    assert result["tokens"] == 2
