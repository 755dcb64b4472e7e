"""The two variants between FSDP2 and ODC train exactly what a single process trains.

* FSDP2 whose all-gathers and reduce-scatters are carried by ODC's shared memory
  (``fsdp.transport = shared-memory``) reaches the parameters of a single process and of stock
  FSDP2 (gloo) on the same rows, at 2 real gloo ranks, and records the same collectives;
* ODC in lockstep (``odc.meet = microbatch``, same-count split) reaches the single process's
  parameters and meets before every microbatch.

SGD at learning rate 1 (as in test_equivalence): a lost or doubled gradient shows at full size.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import free_port, spawn

from greenbench.data import DataPlan, MarkovSource, StepBatch
from greenbench.distributed.device import DistContext
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.settings import SCHEMA
from greenbench.sources.builtin import next_token_loss
from greenbench.strategies import STRATEGIES

pytestmark = pytest.mark.slow

STEPS = 3
OPT_LR = 1.0
DATA = dict(
    lengths="swe-smith",
    seq_len=512,
    global_batch=8,
    micro_batch=1,
    balance="same-count",
    cost_model="linear",
    scale=1 / 128,
    seed=3,
)
VARIANTS = {
    "fsdp": ("fsdp", {}),
    "fsdp-shm": ("fsdp", {"fsdp.transport": "shared-memory"}),
    "odc-lockstep": ("odc", {"odc.meet": "microbatch", "data.balance": "same-count"}),
}


def builder(family: str) -> ModelBuilder:
    return ModelBuilder(
        FAMILIES[family], "tiny", seed=0, kernel="auto" if family == "mamba" else "none"
    )


def plan(family: str) -> DataPlan:
    vocab = FAMILIES[family].info("tiny").vocab_size
    return DataPlan(source=MarkovSource(vocab_size=vocab, seed=1), **DATA)


def single(family: str, world: int) -> dict[str, torch.Tensor]:
    """One process trained on exactly the rows ``world`` ranks train on, per step."""
    strategy = STRATEGIES["single"].load()(DistContext(0, 0, 1, torch.device("cpu"), torch.float32))
    model = strategy.parallelize(builder(family))
    schedule = strategy.schedule(next_token_loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=OPT_LR)
    data = plan(family)
    for step in range(STEPS):
        parts = data.split(step, world)
        whole = StepBatch(
            microbatches=tuple(mb for part in parts for mb in part.microbatches),
            global_tokens=parts[0].global_tokens,
            cost=sum(p.cost for p in parts),
        )
        schedule.train_step(model, optimizer, whole)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _rank(rank: int, world: int, port: int, variant: str, family: str, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        name, over = VARIANTS[variant]
        ctx = DistContext(rank, rank, world, torch.device("cpu"), torch.float32)
        s = STRATEGIES[name].load()(ctx)
        s.configure(SCHEMA.config({"strategy": name, "model.family": family, **over}))
        model = s.parallelize(builder(family))
        schedule = s.schedule(next_token_loss)
        optimizer = torch.optim.SGD(list(s.parameters(model)), lr=OPT_LR)
        data = plan(family)
        counts = []
        for step in range(STEPS):
            batch = s.assignment.batch(data, step)
            schedule.train_step(model, optimizer, batch)
            counts.append(len(batch.microbatches))
        if name == "odc":
            params = s.full_parameters()
        else:
            params = {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}
        report = {"ops": [c.op for c in s.comm.calls], "counts": counts, "params": params}
        s.close()
        torch.save(report, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def run_ranks(tmp_path: Path, variant: str, family: str, world: int = 2) -> list[dict]:
    out = str(tmp_path / f"{variant}-{family}")
    spawn(_rank, (world, free_port(), variant, family, out), world)
    return [torch.load(f"{out}.{r}", weights_only=False) for r in range(world)]


def assert_trained_as(got: dict, reference: dict, family: str) -> None:
    assert got.keys() == reference.keys()
    initial = dict(builder(family).build().named_parameters())
    for name, ref in reference.items():
        assert not torch.equal(ref, initial[name].detach()), f"{name} never moved"
        torch.testing.assert_close(got[name], ref, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("family", ["transformer", "mamba"])
def test_fsdp_on_shared_memory_equals_a_single_process_and_stock_fsdp(tmp_path: Path, family: str):
    shm = run_ranks(tmp_path, "fsdp-shm", family)
    stock = run_ranks(tmp_path, "fsdp", family)
    assert_trained_as(shm[0]["params"], single(family, 2), family)
    for name, ref in stock[0]["params"].items():
        torch.testing.assert_close(shm[0]["params"][name], ref, rtol=1e-5, atol=1e-6, msg=name)
    # the same engine: the same collectives, in the same order, on every rank
    collectives = {"all_gather", "reduce_scatter"}
    for a, b in zip(shm, stock, strict=True):
        assert [o for o in a["ops"] if o in collectives] == [
            o for o in b["ops"] if o in collectives
        ]
        assert "all_gather" in a["ops"] and "reduce_scatter" in a["ops"]


def test_odc_in_lockstep_equals_a_single_process_and_meets_every_microbatch(tmp_path: Path):
    reports = run_ranks(tmp_path, "odc-lockstep", "transformer")
    assert_trained_as(reports[0]["params"], single("transformer", 2), "transformer")
    counts = [r["counts"] for r in reports]
    assert counts[0] == counts[1]  # same-count: every rank the same microbatches
    assert max(counts[0]) > 1  # so there are meetings between microbatches to check
    for r in reports:
        # two barriers per minibatch, and one before each microbatch after the first
        assert r["ops"].count("barrier") == sum(2 + (c - 1) for c in r["counts"])
        assert not {"all_gather", "reduce_scatter"} & set(r["ops"])
