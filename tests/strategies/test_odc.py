"""ODC is sharded data parallelism with on-demand gets and pushes, and equals a single process.

Real gloo processes (2 and 4) train a few optimizer steps with ``odc`` on skewed lengths split by
cost (``balanced-cost``), so ranks run different numbers of microbatches. Each rank reports what
it held and what it communicated; rank 0 reads the whole model back from the owners' shards.
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

import psutil
import pytest
import torch
from helpers import free_port, spawn

from greenbench.data import DataPlan, MarkovSource, StepBatch
from greenbench.distributed.device import DistContext
from greenbench.launcher.launch import run_specs
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.sources.builtin import next_token_loss
from greenbench.spec import expand
from greenbench.store import read_frame
from greenbench.strategies import STRATEGIES

pytestmark = pytest.mark.slow

STEPS = 3
OPT_LR = 1.0  # SGD, as in test_equivalence: a lost or doubled gradient shows at full size
# swe-smith lengths at this scale give ranks unequal microbatch counts under balanced-cost
# (2 ranks: 3 and 2 in step 0; 4 ranks: 2, 1, 1, 1) — the test checks that it still does
DATA = dict(
    lengths="swe-smith",
    seq_len=512,
    global_batch=8,
    micro_batch=1,
    cost_model="linear",
    scale=1 / 128,
    seed=3,
)


def plan(family: str, balance: str) -> DataPlan:
    vocab = FAMILIES[family].info("tiny").vocab_size
    return DataPlan(source=MarkovSource(vocab_size=vocab, seed=1), balance=balance, **DATA)


def builder(family: str) -> ModelBuilder:
    return ModelBuilder(
        FAMILIES[family], "tiny", seed=0, kernel="auto" if family == "mamba" else "none"
    )


def context(rank: int, world: int) -> DistContext:
    return DistContext(rank, rank, world, torch.device("cpu"), torch.float32)


@functools.cache
def single_on(family: str, world: int) -> tuple[dict[str, torch.Tensor], list[float]]:
    """One process trained on exactly the rows the ``world`` ODC ranks train on, per step
    (computed once per configuration; callers only read it)."""
    strategy = STRATEGIES["single"].load()(context(0, 1))
    model = strategy.parallelize(builder(family))
    schedule = strategy.schedule(next_token_loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=OPT_LR)
    data = plan(family, "balanced-cost")
    losses = []
    for step in range(STEPS):
        parts = data.split(step, world)
        whole = StepBatch(
            microbatches=tuple(mb for part in parts for mb in part.microbatches),
            global_tokens=parts[0].global_tokens,
            cost=sum(p.cost for p in parts),
        )
        loss, _ = schedule.train_step(model, optimizer, whole)
        losses.append(loss)
    return {n: p.detach().clone() for n, p in model.named_parameters()}, losses


def _rank(
    rank: int, world: int, port: int, strategy: str, family: str, transport: str, out: str
) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        s = STRATEGIES[strategy].load()(context(rank, world))
        if strategy == "odc":
            s.transport_kind = transport
        model = s.parallelize(builder(family))
        schedule = s.schedule(next_token_loss)
        optimizer = torch.optim.SGD(list(s.parameters(model)), lr=OPT_LR)
        data = plan(family, STRATEGIES[strategy].balance)
        report: dict = {"losses": [], "counts": [], "idle_after_step": []}
        for step in range(STEPS):
            batch = s.assignment.batch(data, step)
            loss, _ = schedule.train_step(model, optimizer, batch)
            report["losses"].append(loss)
            report["counts"].append(len(batch.microbatches))
            if strategy == "odc":
                report["idle_after_step"].append(not any(u.materialized for u in s.units))
        report["ops"] = [c.op for c in s.comm.calls]
        if strategy == "odc":
            params = s.full_parameters()  # every rank takes part (ranks meet first)
            report["params"] = params if rank == 0 else None
            report["shard_numel"] = sum(p.numel() for p in s.shards)
            report["acc_numel"] = sum(s.transport.accumulator(u.index).numel() for u in s.units)
            report["unit_numel"] = [u.numel for u in s.units]
            report["unit_padded"] = [u.padded for u in s.units]
            report["model_params_left"] = sum(p.numel() for p in model.parameters())
            report["peak"] = s.peak_materialized
            s.close()
            report["odc_threads_after_close"] = [
                t.name for t in threading.enumerate() if t.name.startswith("odc")
            ]
        torch.save(report, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def run_ranks(tmp_path_factory: pytest.TempPathFactory):
    """Launch ``world`` ranks of a configuration, once per module: the same deterministic run
    serves every test that reads its reports (they only read them)."""
    done: dict[tuple, list[dict]] = {}
    root = tmp_path_factory.mktemp("odc")

    def run(strategy: str, family: str, world: int, transport: str = "shm") -> list[dict]:
        key = (strategy, family, world, transport)
        if key not in done:
            out = str(root / "-".join(map(str, key)))
            spawn(_rank, (world, free_port(), strategy, family, transport, out), world)
            done[key] = [torch.load(f"{out}.{r}", weights_only=False) for r in range(world)]
        return done[key]

    return run


@pytest.mark.parametrize(
    ("family", "world", "transport"),
    [
        ("transformer", 2, "shm"),
        ("transformer", 4, "shm"),
        ("mamba", 2, "shm"),
        ("transformer", 2, "p2p"),
        ("transformer", 4, "p2p"),
    ],
)
def test_odc_reaches_the_single_process_parameters_with_unequal_microbatch_counts(
    run_ranks, family: str, world: int, transport: str
):
    """On either transport this machine runs (shared memory, point-to-point over gloo)."""
    reference, ref_losses = single_on(family, world)
    reports = run_ranks("odc", family, world, transport)
    counts = [r["counts"] for r in reports]
    assert any(len({c[s] for c in counts}) > 1 for s in range(STEPS)), counts
    got = reports[0]["params"]
    assert got.keys() == reference.keys()
    initial = dict(builder(family).build().named_parameters())
    for name, ref in reference.items():
        assert not torch.equal(ref, initial[name].detach()), f"{name} never moved"
        torch.testing.assert_close(got[name], ref, rtol=1e-4, atol=1e-5, msg=name)
    per_step = [sum(r["losses"][s] for r in reports) for s in range(STEPS)]
    torch.testing.assert_close(per_step, ref_losses, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("world", [2, 4])
def test_odc_follows_the_fsdp_loss_curve_on_the_same_minibatches(run_ranks, world: int):
    odc = run_ranks("odc", "transformer", world)
    fsdp = run_ranks("fsdp", "transformer", world)
    # the same documents, split by cost (odc) or into equal counts (fsdp): the summed loss of
    # each minibatch is the same
    for step in range(STEPS):
        a = sum(r["losses"][step] for r in odc)
        b = sum(r["losses"][step] for r in fsdp)
        assert a == pytest.approx(b, rel=1e-5), (step, a, b)
    assert [r["counts"] for r in odc] != [r["counts"] for r in fsdp]


@pytest.mark.parametrize("transport", ["shm", "p2p"])
@pytest.mark.parametrize("world", [2, 4])
def test_each_rank_holds_a_shard_and_talks_point_to_point_within_a_minibatch(
    run_ranks, world: int, transport: str
):
    reports = run_ranks("odc", "transformer", world, transport)
    for r in reports:
        padded = r["unit_padded"]
        assert sum(padded) >= sum(r["unit_numel"])
        assert all(
            p % world == 0 and p - n < world for p, n in zip(padded, r["unit_numel"], strict=True)
        )
        assert r["shard_numel"] == sum(padded) // world  # 1/W of the parameters
        assert r["acc_numel"] == r["shard_numel"]  # and of the gradient accumulators
        assert r["model_params_left"] == 0  # the module keeps no replica of its own
        root, blocks = padded[0], padded[1:]
        # besides its shards, a rank holds only the units it computes: the root, the block in
        # hand and the one being prefetched
        assert r["peak"] <= root + 2 * max(blocks) < sum(padded)
        assert all(r["idle_after_step"])  # and nothing between minibatches
        assert r["odc_threads_after_close"] == []
        # per minibatch: a barrier, then only gets and pushes, then the flush and a barrier
        ops = r["ops"]
        assert ops.count("barrier") == 2 * STEPS
        marks = [i for i, op in enumerate(ops) if op == "barrier"]
        for start, end in zip(marks[::2], marks[1::2], strict=True):
            inside = ops[start + 1 : end]
            assert set(inside) == {"get", "push", "push_flush"}, inside
            assert inside[-1] == "push_flush"


def test_killing_an_odc_rank_mid_minibatch_fails_the_run_naming_it_and_leaves_nothing(
    tmp_path: Path,
):
    shm_before = set(os.listdir("/dev/shm"))
    settings = {
        "strategy": "odc",
        "nproc": 2,
        "data.lengths": "swe-smith",
        "data.seq_len": 512,
        "data.scale": 1 / 128,
        "data.global_batch": 8,
        "train.warmup_steps": 1,
        "train.steps": 2,
        "train.min_window_s": 0.0,
        "energy.idle_s": 0.0,
        "repeats": 1,
        "debug.kill_rank": 1,
        "debug.fault_microbatch": 1,  # after the first microbatch's gets and pushes
    }
    db = tmp_path / "r.duckdb"
    summary = run_specs(expand("fsdp-vs-odc", [settings]), db)
    assert summary.statuses == ["failed"]
    frame = read_frame(db, "SELECT status, error, failed_rank FROM runs")
    assert frame.error[0].startswith("rank 1: killed by SIGKILL"), frame.error[0]
    assert frame.failed_rank[0] == 1
    alive = [p for p in psutil.Process().children(recursive=True) if p.is_running()]
    assert [p.cmdline() for p in alive if "greenbench" in " ".join(p.cmdline())] == []
    assert set(os.listdir("/dev/shm")) <= shm_before  # no shared-memory segment left
    with open("/proc/net/unix") as sockets:
        assert "greenbench-odc" not in sockets.read()  # no drain thread still listening
