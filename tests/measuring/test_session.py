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
