"""A hung rank is named: a real gloo rank that sleeps while its peer waits in a collective, and
the classification of faulthandler stacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import QUICK, rank_start_s

from greenbench.launcher.launch import run_specs
from greenbench.rank.hangs import classify
from greenbench.spec import expand
from greenbench.store import get_run, read_frame

WAITING = """Thread 0x00007f0000000001 (most recent call first):
  File "/x/threading.py", line 320 in wait

Current thread 0x00007f0000000002 (most recent call first):
  File "/site-packages/torch/distributed/distributed_c10d.py", line 4800 in barrier
  File "/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/work/greenbench/strategies/base.py", line 230 in barrier
"""
SLEEPING = """Current thread 0x00007f0000000003 (most recent call first):
  File "/work/greenbench/rank/worker.py", line 190 in inject_faults
  File "/work/greenbench/rank/worker.py", line 120 in run_rank
"""
COMPUTING = """Current thread 0x00007f0000000004 (most recent call first):
  File "/site-packages/torch/nn/functional.py", line 2000 in linear
  File "/work/greenbench/strategies/base.py", line 170 in microbatch_loss
"""


def test_the_rank_outside_a_collective_is_the_one_that_hung():
    hang = classify({0: WAITING, 1: SLEEPING, 2: WAITING})
    assert hang.hung == (1,) and hang.waiting == (0, 2) and hang.rank == 1
    assert hang.describe() == (
        "; rank 1 never reached the collective rank 0, 2 waited in "
        "(it was in inject_faults (worker.py:190))"
    )
    computing = classify({0: COMPUTING, 1: WAITING})
    assert "called from microbatch_loss (base.py:170)" in computing.describe()


def test_nobody_is_named_when_nobody_waits_or_nothing_was_dumped():
    assert classify({0: SLEEPING, 1: COMPUTING}).rank is None
    assert classify({}).describe() == ""
    assert classify({0: SLEEPING}).describe().startswith("; rank 0 was in inject_faults")


@pytest.mark.slow
def test_a_real_rank_that_sleeps_is_named(tmp_path: Path):
    # long enough for both ranks to start and reach the step where rank 1 sleeps, however busy
    # the machine is (two ranks start side by side: twice a start, plus the steps before it)
    timeout_s = round(10.0 + 2 * rank_start_s())
    spec = expand(
        "transformer-vs-mamba",
        [
            {
                **QUICK,
                "strategy": "ddp",
                "nproc": 2,
                "debug.hang_rank": 1,
                "timeout_s": float(timeout_s),
            }
        ],
    )[0]
    db = tmp_path / "r.duckdb"
    assert run_specs([spec], db).statuses == ["failed"]
    (run_id,) = read_frame(db, "SELECT run_id FROM runs")["run_id"]
    run = get_run(db, run_id)
    assert run["failed_rank"] == 1
    assert run["error"].startswith(
        f"timed out after {timeout_s} s (timeout_s); "
        "rank 1 never reached the collective rank 0 waited in"
    )
    assert "inject_faults" in run["error"]
    assert (Path(run["log_path"]) / "stack-rank0.txt").read_text()  # the stacks are kept
