"""A two-node SLURM job on one machine: the job's function started once per "node" with the
environment srun gives each task (SLURM_NODEID, SLURM_JOB_NODELIST, …), as submitit runs it.
Node 0 runs every configuration and writes their shards; node 1 joins the one spanning two
nodes through the rendezvous at the first host and sits out the one-node configuration; the
merged two-node run holds both nodes' ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import QUICK

from greenbench.cluster.job import node_groups
from greenbench.spec import expand
from greenbench.store import merge_shards, pending_shards, read_frame

RUN = (
    "import json, sys; from greenbench.cluster.job import RunJob; "
    "print(json.dumps(RunJob()(json.load(open(sys.argv[1])))))"
)


TWO_NODES = {
    "strategy": "ddp", "nproc": 1, "nnodes": 2, "data.lengths": "fixed", "data.global_batch": 2,
    "timeout_s": 240,
}  # fmt: skip


def specs() -> list:
    two = expand("data-parallel", [QUICK | TWO_NODES], label="two-node")
    one = expand("transformer-vs-mamba", [QUICK], label="two-node")
    return one + two


def test_the_widest_configurations_come_first() -> None:
    ordered = node_groups(specs(), ["a", "b"])
    assert [(n, [r for _, r in members]) for n, members in ordered] == [(2, ["b"]), (1, ["a"])]


@pytest.mark.slow
def test_a_two_node_job_stores_one_run_with_both_nodes_ranks(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    payload = tmp_path / "payload.json"
    run_ids = ["0000000000a1", "0000000000a2"]
    payload.write_text(json.dumps({
        "db": str(db), "specs": [s.to_dict() for s in specs()], "run_ids": run_ids,
    }))  # fmt: skip
    procs = []
    for node in (0, 1):
        env = os.environ | {
            "SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": f"9{os.getpid()}",
            "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": str(node), "SLURM_NTASKS": "2",
            "SLURM_PROCID": str(node), "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "localhost",
        }  # fmt: skip
        procs.append(subprocess.Popen(
            [sys.executable, "-c", RUN, str(payload)], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        ))  # fmt: skip
    outs = [p.communicate(timeout=400) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    node0 = json.loads(outs[0][0].strip().splitlines()[-1])
    node1 = json.loads(outs[1][0].strip().splitlines()[-1])
    assert [r["run_id"] for r in node0] == ["0000000000a2", "0000000000a1"]  # widest first
    assert all(r["status"] == "ok" for r in node0)
    assert [r["name"] for r in node1] == [specs()[1].name]  # the two-node one only
    assert [p.stem for p in pending_shards(db)] == run_ids  # node 0 wrote both; node 1 none
    merge_shards(db)
    ranks = read_frame(db, "SELECT run_id, count(*) AS n FROM rank_results GROUP BY 1 ORDER BY 1")
    assert ranks.n.tolist() == [1, 2]
    comm = read_frame(db, "SELECT rank, op FROM comm_records WHERE run_id = '0000000000a2'")
    assert {(0, "all_reduce"), (1, "all_reduce")} <= set(zip(comm["rank"], comm.op, strict=True))
    nnodes = read_frame(db, "SELECT nnodes FROM runs ORDER BY run_id").nnodes.tolist()
    assert nnodes == [1, 2]
