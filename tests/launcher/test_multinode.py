"""Two "nodes" on one machine: two launchers joined by torchrun's rendezvous, as srun starts them.

Node 0's launcher stores the run with every rank of both nodes (global rank 0 gathers them);
node 1's launcher runs its ranks and writes nothing. Bad multi-node options are refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from helpers import free_port

from greenbench.cli import main

TINY = [
    *("--workload", "data-parallel"),
    *("--set", "strategy=ddp", "--set", "data.lengths=fixed"),
    *("--set", "data.seq_len=64", "--set", "data.global_batch=4"),
    *("--set", "train.warmup_steps=1", "--set", "train.min_window_s=0.2"),
    *("--set", "energy.idle_s=0.2", "--set", "timeout_s=240"),
    *("--repeats", "1", "--nproc", "1", "--nnodes", "2"),
    # two "nodes" on one machine: gloo on its CPU (on one GPU, NCCL refuses two ranks on it)
    *("--device", "cpu"),
]


def greenbench(*args: str) -> list[str]:
    return [sys.executable, "-c", "from greenbench.cli import main; main()", *args]


@pytest.mark.slow
def test_two_nodes_store_one_run_with_every_rank(tmp_path: Path):
    endpoint = f"127.0.0.1:{free_port()}"
    dbs = [tmp_path / "node0.duckdb", tmp_path / "node1.duckdb"]
    procs = [
        subprocess.Popen(
            greenbench(
                "run", *TINY, "--node-rank", str(n), "--rdzv-endpoint", endpoint, "--db", str(db)
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=os.environ,
        )
        for n, db in enumerate(dbs)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert not dbs[1].exists()  # one writer: node 0's launcher
    con = duckdb.connect(str(dbs[0]), read_only=True)
    status, nnodes = con.execute("SELECT status, nnodes FROM runs").fetchone()
    ranks = con.execute("SELECT DISTINCT rank FROM rank_results ORDER BY rank").fetchall()
    con.close()
    assert (status, nnodes) == ("ok", 2)
    assert [r[0] for r in ranks] == [0, 1]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nnodes", "2"], "needs --rdzv-endpoint"),
        (["--node-rank", "0"], "need both --node-rank"),
        (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], "not below --nnodes"),
        (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "nohost"], "HOST:PORT"),
    ],
)
def test_bad_multinode_options_are_one_line_and_exit_2(tmp_path: Path, args, message):
    db = tmp_path / "r.duckdb"
    result = CliRunner().invoke(
        main, ["run", "--workload", "data-parallel", *args, "--db", str(db)], prog_name="greenbench"
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert message in line
    assert not db.exists()
