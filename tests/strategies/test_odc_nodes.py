"""ODC over point-to-point messages across two "nodes" on one machine: two launchers joined by
torchrun's rendezvous (as srun starts them), each with one rank, train the same minibatches as
one launcher with both ranks, to the same loss. Shared memory cannot span nodes; p2p can."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from helpers import free_port

pytestmark = pytest.mark.slow

TINY = [
    *("--workload", "fsdp-vs-odc"),
    *("--set", "strategy=odc", "--set", "odc.transport=p2p"),
    *("--set", "data.lengths=swe-smith", "--set", "data.seq_len=256"),
    *("--set", "data.scale=0.0078125", "--set", "data.global_batch=4"),
    *("--set", "train.warmup_steps=1", "--set", "train.steps=2"),
    *("--set", "train.min_window_s=0", "--set", "energy.idle_s=0"),
    *("--set", "timeout_s=300", "--repeats", "1", "--device", "cpu"),
]


def greenbench(*args: str) -> list[str]:
    return [sys.executable, "-c", "from greenbench.cli import main; main()", *args]


def stored(db: Path) -> tuple[str, int, str, float, list[int]]:
    con = duckdb.connect(str(db), read_only=True)
    status, nnodes, name = con.execute("SELECT status, nnodes, config_name FROM runs").fetchone()
    (loss,) = con.execute("SELECT loss FROM results").fetchone()
    ranks = [
        r[0] for r in con.execute("SELECT DISTINCT rank FROM rank_results ORDER BY rank").fetchall()
    ]
    con.close()
    return status, nnodes, name, loss, ranks


def test_odc_over_p2p_runs_across_two_nodes_to_the_one_node_loss(tmp_path: Path):
    endpoint = f"127.0.0.1:{free_port()}"
    dbs = [tmp_path / "node0.duckdb", tmp_path / "node1.duckdb"]
    nodes = [
        subprocess.Popen(
            greenbench(
                "run",
                *TINY,
                "--nproc",
                "1",
                "--nnodes",
                "2",
                "--node-rank",
                str(n),
                "--rdzv-endpoint",
                endpoint,
                "--db",
                str(db),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=os.environ,
        )
        for n, db in enumerate(dbs)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outputs
    assert not dbs[1].exists()  # one writer: node 0's launcher
    one = tmp_path / "one.duckdb"
    single = subprocess.run(
        greenbench("run", *TINY, "--nproc", "2", "--db", str(one)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stdout + single.stderr
    status, nnodes, name, loss, ranks = stored(dbs[0])
    assert (status, nnodes, ranks) == ("ok", 2, [0, 1])
    assert "odc[p2p]" in name
    one_status, _, one_name, one_loss, _ = stored(one)
    assert one_status == "ok" and one_name == name
    # the same two ranks on the same minibatches: only where the ranks run differs
    assert loss == pytest.approx(one_loss, rel=1e-5)
