"""Waiting is read from a strategy's own collectives: a late rank's peer waits in them.

Two real gloo processes train one step under ``ddp`` (a model with buffers and one without)
and ``fsdp``; rank 1 sleeps before its
first microbatch (the loop's ``before_microbatch`` hook, where the rank's fault injection sits).
The window is settled as the worker settles it (`greenbench.rank.training.settle_communication`):
rank 0's waiting is then in the strategy's own records (DDP's buffer broadcast or bucket
all-reduce, FSDP2's all-gathers and reduce-scatters), not in a barrier, and the late rank itself
waits for no one.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
from helpers import TINY_DATA, free_port, spawn

from greenbench.data import DataPlan, MarkovSource
from greenbench.distributed.device import DistContext
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.rank.training import settle_communication
from greenbench.rank.window import WindowTally
from greenbench.sources.builtin import next_token_loss
from greenbench.strategies import STRATEGIES

WORLD = 2
LATE_S = 0.5
DATA = TINY_DATA
#: (strategy, family) -> the records a step holds; the Transformer has buffers (rotary
#: frequencies), which DDP broadcasts before the synchronised forward, Mamba has none
OPS = {
    ("ddp", "transformer"): {("dp_replicate", "broadcast"), ("dp_replicate", "all_reduce")},
    ("ddp", "mamba"): {("dp_replicate", "all_reduce")},
    ("fsdp", "transformer"): {("dp_shard", "all_gather"), ("dp_shard", "reduce_scatter")},
}
CASES = list(OPS)


def one_late_step(strategy: str, family: str, rank: int) -> dict:
    torch.manual_seed(0)
    builder = ModelBuilder(FAMILIES[family], "tiny", seed=0, kernel="auto")
    ctx = DistContext(rank, rank, WORLD, torch.device("cpu"), torch.float32)
    strat = STRATEGIES[strategy].load()(ctx)
    model = strat.parallelize(builder)
    schedule = strat.schedule(next_token_loss)
    optimizer = torch.optim.SGD(strat.parameters(model), lr=0.1)
    plan = DataPlan(source=MarkovSource(vocab_size=builder.info.vocab_size, seed=1), **DATA)
    # warm: DDP rebuilds its buckets in the second step, a collective of its reducer's own
    for step in range(2):
        schedule.train_step(model, optimizer, strat.assignment.batch(plan, step))
    strat.comm.take()

    def late(index: int) -> None:
        if rank == 1 and index == 0:
            time.sleep(LATE_S)

    tally = WindowTally()
    start = time.perf_counter()
    schedule.train_step(model, optimizer, strat.assignment.batch(plan, 2), late)
    tally.step_times_s.append(time.perf_counter() - start)
    records = settle_communication(tally, strat.comm, ctx)
    return {
        "records": [(r.dim, r.op, r.calls, r.seconds, r.wait_s) for r in records],
        "wait_s": tally.wait_s,
        "comm_s": tally.comm_s,
        "compute_s": tally.compute_s,
        "note": tally.comm_note,
    }


def _worker(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        results = {case: one_late_step(*case, rank) for case in CASES}
        torch.save(results, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def settled(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("waiting") / "settled"
    spawn(_worker, (free_port(), str(out)), WORLD)
    return [torch.load(f"{out}.{rank}") for rank in range(WORLD)]


@pytest.mark.slow
@pytest.mark.parametrize(("strategy", "family"), CASES)
def test_a_late_ranks_peer_waits_in_the_strategys_own_collectives(
    settled: list[dict], strategy: str, family: str
):
    ops = OPS[strategy, family]
    early, late = (settled[rank][strategy, family] for rank in range(WORLD))
    for ranked in (early, late):
        assert {(dim, op) for dim, op, *_ in ranked["records"]} == ops  # no barrier
        assert ranked["note"] == ""  # the ranks' collectives matched: waiting is known
        # every second of the step is compute, transfer or waiting, none negative
        assert min(ranked["compute_s"], ranked["comm_s"], ranked["wait_s"]) >= 0.0
    # rank 0 sat in the collectives for most of rank 1's delay; rank 1 waited for no one
    assert early["wait_s"] > LATE_S * 0.5, early
    assert late["wait_s"] < early["wait_s"] - LATE_S * 0.4, (early, late)
    assert early["wait_s"] == pytest.approx(sum(r[4] for r in early["records"]))
