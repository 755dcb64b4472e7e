"""The ODC transports between real processes (shared memory, and point-to-point messages over
gloo): gets read the owner's shard, pushes from several senders accumulate at the owner in any
order (more of them than the slots a sender may have in flight), and a peer that dies is named to
the rank waiting on it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from helpers import free_port, spawn

from greenbench.strategies.odc import p2p
from greenbench.strategies.odc.p2p import P2PTransport
from greenbench.strategies.odc.transport import SLOTS, PeerLost, SharedMemoryTransport, Transport

pytestmark = pytest.mark.slow

SHARDS = [5, 3]  # two units; a mailbox slot holds the larger shard
PUSHES = 4 * max(SLOTS, p2p.SLOTS)  # per sender and unit: a sender must wait for its owner
#: the transports this machine runs (CPU ranks)
KINDS = ["shm", "p2p"]


def make(kind: str, rank: int, world: int, token: str) -> Transport:
    import torch.distributed as dist

    if kind == "shm":
        return SharedMemoryTransport(rank, world, SHARDS, token, connect=dist.barrier)
    return P2PTransport(rank, list(range(world)), SHARDS, torch.device("cpu"))


def _rank(rank: int, world: int, port: int, token: str, kind: str, scenario: str, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    transport = make(kind, rank, world, token)
    for unit, n in enumerate(SHARDS):
        transport.shard(unit).copy_(torch.arange(n) + 100 * rank + 10 * unit)
    transport.zero_accumulators()
    dist.barrier()
    report: dict = {}
    if scenario == "accumulate":
        got = torch.empty(SHARDS[1])
        transport.get((rank + 1) % world, 1, got)
        report["got"] = got
        for i in range(PUSHES):
            for owner in range(world):
                for unit, n in enumerate(SHARDS):
                    transport.push(owner, unit, torch.full((n,), float(rank + 1) * (i + 1)))
        transport.flush()
        dist.barrier()
        report["acc"] = [transport.accumulator(u).clone() for u in range(len(SHARDS))]
    elif scenario == "peer dies":
        pids = [0] * world
        dist.all_gather_object(pids, os.getpid())
        if rank == 1:
            os._exit(0)  # gone without closing anything
        # push only once it is gone: a rank 1 still alive for a moment (its main thread waiting
        # for its turn on a busy machine) would drain every push and nothing would be lost
        _wait_until_gone(pids[1])
        try:
            for _ in range(PUSHES):
                transport.push(1, 0, torch.ones(SHARDS[0]))
            transport.flush()
            report["error"] = None
        except PeerLost as exc:
            report["error"] = str(exc)
    transport.close()
    report["threads_after_close"] = [t.name for t in threading.enumerate() if "odc" in t.name]
    torch.save(report, f"{out}.{rank}")
    os._exit(0)  # the peer may be gone: skip the process group's goodbye


def _wait_until_gone(pid: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)
    raise AssertionError(f"rank process {pid} did not end")


def run(tmp_path: Path, world: int, kind: str, scenario: str) -> dict[int, dict]:
    out = str(tmp_path / f"{kind}-{scenario.replace(' ', '-')}")
    token = os.urandom(4).hex()
    spawn(_rank, (world, free_port(), token, kind, scenario, out), world)
    return {r: torch.load(f"{out}.{r}") for r in range(world) if Path(f"{out}.{r}").exists()}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("world", [2, 3])
def test_gets_read_the_owner_and_pushes_accumulate_at_the_owner(
    tmp_path: Path, world: int, kind: str
):
    reports = run(tmp_path, world, kind, "accumulate")
    senders_total = sum(float(r + 1) for r in range(world)) * sum(range(1, PUSHES + 1))
    for rank, report in reports.items():
        owner = (rank + 1) % world
        assert torch.equal(report["got"], torch.arange(SHARDS[1]) + 100 * owner + 10)
        for unit, n in enumerate(SHARDS):
            assert torch.equal(report["acc"][unit], torch.full((n,), senders_total))
        assert report["threads_after_close"] == []  # every server or drain thread stopped


@pytest.mark.parametrize("kind", KINDS)
def test_a_dead_peer_is_named_to_the_rank_pushing_to_it(tmp_path: Path, kind: str):
    reports = run(tmp_path, 2, kind, "peer dies")
    assert list(reports) == [0]
    assert reports[0]["error"] is not None and "rank 1" in reports[0]["error"]
