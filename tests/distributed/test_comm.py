"""Communication records: bytes are the tensors' bytes, a late rank's peer waits, barriers are
waiting; on a GPU, NCCL calls are timed with CUDA events."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from helpers import free_port, spawn

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.rank.window import settle_calls, unsplit_note


def _rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        comm = CommRecorder(torch.device("cpu"))
        x = torch.ones(1000, dtype=torch.float32)
        if rank == 1:
            time.sleep(0.4)  # rank 1 arrives late: rank 0 waits for it
        with comm.span("dp_shard", "all_reduce", tensor_bytes(x)):
            dist.all_reduce(x)
        t0 = time.perf_counter()
        if rank == 0:
            time.sleep(0.3)
        dist.barrier()
        comm.add("world", "barrier", 0, time.perf_counter() - t0, waits=True)
        calls = [(c.dim, c.op, c.nbytes, c.seconds, c.waits) for c in comm.take()]
        per_rank: list = [None] * world
        dist.all_gather_object(per_rank, calls)
        records, transfer, waiting = settle_calls(per_rank, rank)
        torch.save({"records": records, "transfer": transfer, "waiting": waiting}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_records_on_gloo_say_bytes_dims_and_who_waited(tmp_path: Path):
    out = str(tmp_path / "comm")
    spawn(_rank, (2, free_port(), out), 2)
    r0, r1 = (torch.load(f"{out}.{r}", weights_only=False) for r in range(2))
    for r in (r0, r1):
        by_op = {(c.dim, c.op): c for c in r["records"]}
        reduce = by_op["dp_shard", "all_reduce"]
        assert reduce.calls == 1 and reduce.bytes == 4000  # 1000 float32 values
        assert by_op["world", "barrier"].bytes == 0
        assert r["transfer"] + r["waiting"] == pytest.approx(sum(c.seconds for c in r["records"]))
    # rank 0 waited ~0.4 s in the all-reduce for the late rank 1; rank 1 waited in the barrier
    r0_reduce = {(c.dim, c.op): c for c in r0["records"]}["dp_shard", "all_reduce"]
    r1_reduce = {(c.dim, c.op): c for c in r1["records"]}["dp_shard", "all_reduce"]
    assert r0_reduce.wait_s > 0.2 and r1_reduce.wait_s == 0.0
    r1_barrier = {(c.dim, c.op): c for c in r1["records"]}["world", "barrier"]
    assert r1_barrier.wait_s == r1_barrier.seconds > 0.1


def test_settling_never_invents_waiting_when_ranks_disagree():
    # two ranks whose call sequences differ (they should not): all of it counts as transfer
    per_rank = [
        [("dp_shard", "all_gather", 8, 0.5, False)],
        [("dp_shard", "reduce_scatter", 8, 0.1, False)],
    ]
    records, transfer, waiting = settle_calls(per_rank, 0)
    assert (transfer, waiting) == (0.5, 0.0) and records[0].wait_s == 0.0
    # and the window says its waiting is unknown rather than storing a silent zero
    assert "unknown" in unsplit_note(per_rank)


def test_matched_collectives_and_waits_need_no_note():
    per_rank = [
        [("world", "barrier", 0, 0.3, True), ("dp_shard", "all_gather", 8, 0.5, False)],
        [("dp_shard", "get", 8, 0.1, False), ("dp_shard", "all_gather", 8, 0.1, False)],
    ]
    assert unsplit_note(per_rank) == ""


def _nccl_rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=1)
    try:
        comm = CommRecorder(torch.device("cuda", 0))
        x = torch.ones(1 << 20, device="cuda")  # 4 MiB
        with comm.span("world", "all_reduce", tensor_bytes(x)):
            dist.all_reduce(x)
        y = torch.ones(1 << 18, device="cuda")
        with comm.span("world", "all_reduce", tensor_bytes(y)) as call:
            work = dist.all_reduce(y, async_op=True)
        comm.finish_async(call, work).wait()
        calls = comm.take()
        torch.save([(c.dim, c.op, c.nbytes, c.seconds) for c in calls], out)
    finally:
        dist.destroy_process_group()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nccl_collectives_are_timed_with_cuda_events(tmp_path: Path):
    # one rank, in this process: a forked child cannot use CUDA once this process has (another
    # cuda test may have initialised it), and a spawned one would re-import the test module
    out = str(tmp_path / "nccl.pt")
    _nccl_rank(0, free_port(), out)
    calls = torch.load(out)
    assert [c[2] for c in calls] == [4 << 20, 1 << 20]  # bytes are the tensors' bytes
    assert all(c[3] > 0 for c in calls)  # timed on the GPU, not left at 0


def test_point_to_point_calls_are_transfer_even_when_ranks_issue_the_same_ones():
    # ODC's gets and pushes: the same sequence on both ranks, but no rank waits for another in
    # them, so the slower copy is not "waiting"; the collective beside them is still split
    per_rank = [
        [("dp_shard", "get", 8, 0.5, False), ("world", "all_reduce", 8, 0.4, False)],
        [("dp_shard", "get", 8, 0.1, False), ("world", "all_reduce", 8, 0.1, False)],
    ]
    records, transfer, waiting = settle_calls(per_rank, 0)
    by_op = {r.op: r for r in records}
    assert by_op["get"].wait_s == 0.0
    assert by_op["all_reduce"].wait_s == pytest.approx(0.3)
    assert (transfer, waiting) == (pytest.approx(0.6), pytest.approx(0.3))
