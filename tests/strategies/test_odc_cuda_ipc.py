"""ODC's CUDA IPC transport: refused with its reason where it cannot run (anywhere but CUDA ranks
of one node), and, on a GPU, gets and pushes between two processes sharing one GPU's memory.

Two processes on ONE GPU: NCCL refuses two ranks on one device, but CUDA IPC between two
processes on one device works, and the handles are exchanged over a gloo group. The ranks are
spawned, not forked (they use CUDA)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import free_port

from greenbench.spec import expand
from greenbench.strategies.odc.transport import SLOTS

SHARDS = [5, 3]  # two units; a mailbox slot holds the larger shard
PUSHES = 4 * SLOTS  # per sender, owner and unit: a sender must wait for its owner's drain
WORLD = 2


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({}, "odc.transport=cuda-ipc shares GPU memory: set device=cuda"),
        (
            {"device": "cuda", "nnodes": 2, "nproc": 1},
            "odc.transport=cuda-ipc runs within one node",
        ),
    ],
)
def test_cuda_ipc_is_refused_with_its_reason_off_one_nodes_gpus(overrides: dict, reason: str):
    from greenbench.launcher.preflight import why_unsupported

    specs = expand("fsdp-vs-odc", [{"strategy": "odc", "odc.transport": "cuda-ipc", **overrides}])
    assert specs and all(reason in (why_unsupported(s) or "") for s in specs)
    on_gpus = expand(
        "fsdp-vs-odc", [{"strategy": "odc", "odc.transport": "cuda-ipc", "device": "cuda"}]
    )
    assert on_gpus and all(why_unsupported(s) is None for s in on_gpus)


def _rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from greenbench.strategies.odc.cuda_ipc import CudaIpcTransport

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    device = torch.device("cuda", 0)  # both ranks on one GPU
    torch.cuda.set_device(device)
    transport = CudaIpcTransport(rank, WORLD, SHARDS, f"test-{port}", device)
    for unit, n in enumerate(SHARDS):  # values no float32 sum rounds: exact comparisons
        shard = torch.arange(n, dtype=torch.float32) + 100 * rank + 10 * unit + 0.25
        transport.shard(unit).copy_(shard.to(device))
    transport.zero_accumulators()  # synchronises the device: the shards are in memory
    dist.barrier()
    report: dict = {"got": []}
    for unit, n in enumerate(SHARDS):
        got = torch.full((n,), float("nan"), device=device)
        transport.get(1 - rank, unit, got)
        report["got"].append(got.cpu())
    for i in range(PUSHES):
        for owner in range(WORLD):
            for unit, n in enumerate(SHARDS):
                grad = torch.full((n,), float(rank + 1) * (i + 1), device=device)
                transport.push(owner, unit, grad)
                del grad  # the transport keeps it until its copy is done
    transport.flush()
    torch.cuda.synchronize(device)
    dist.barrier()
    report["acc"] = [transport.accumulator(u).cpu() for u in range(len(SHARDS))]
    transport.close()
    dist.barrier()  # no rank lets go of its memory while a peer may still map it
    torch.save(report, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.cuda
def test_gets_are_the_owners_shard_and_pushes_from_both_add_up_on_one_gpu():
    import torch.multiprocessing as mp

    out = str(Path(tempfile.mkdtemp()) / "ipc")
    mp.start_processes(_rank, args=(free_port(), out), nprocs=WORLD, start_method="spawn")
    total = sum(float(r + 1) for r in range(WORLD)) * sum(range(1, PUSHES + 1))
    for rank in range(WORLD):
        report = torch.load(f"{out}.{rank}")
        owner = 1 - rank
        for unit, n in enumerate(SHARDS):
            want = torch.arange(n, dtype=torch.float32) + 100 * owner + 10 * unit + 0.25
            assert torch.equal(report["got"][unit], want)  # bit-exact
            assert torch.equal(report["acc"][unit], torch.full((n,), total))
