"""Every strategy evaluates the whole model on the whole held-out set, as one process does.

Real gloo processes train the tiny Transformer in float32 from the same seed and evaluate it on
the held-out set every few steps (before the first step too): each evaluation, on every rank,
equals the single process's (its summed loss and its real tokens; the mean within 1e-4). The
held-out set is sized so that a rank's share ends in a partial microbatch and a pipeline runs
its forward-only schedule more than once, the last run padded. Training
with the evaluations in between staying equal to the single process shows they changed nothing
(no gradient, no step, parameters left as they were). SkipPipe, whose training skips stages and
can leave a stopped node's replica behind, is checked against one process evaluating the
weights its nodes hold.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import TINY_DATA, free_port, spawn

from greenbench.data import DataPlan, MarkovSource
from greenbench.distributed.device import DistContext
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.settings import SCHEMA
from greenbench.sources.builtin import next_token_loss
from greenbench.spec import DEFAULTS
from greenbench.strategies import STRATEGIES
from greenbench.vocabulary import Layout

pytestmark = pytest.mark.slow

FAMILY = "transformer"
STEPS = 10
EVERY = 5  # evaluated before steps 0 and 5 and after the last: one evaluation between steps
# SGD: the update is linear in the gradient, so float reordering stays small over the steps
LR = 0.5
#: held-out documents: five microbatches of two rows whole, three (2, 2 and 1 rows) on each of
#: two data-parallel ranks; a pipeline built for four microbatches (two beside two data-parallel
#: shards) runs its schedule twice, the second time mostly padding
HELD_OUT = 10
#: on the mean loss (nats per token)
ATOL = 1e-4

#: strategy -> the (dimension, operation) records its evaluations must show
DATA_PARALLEL = {
    "ddp": {("world", "all_reduce")},
    "fsdp": {("dp_shard", "all_gather"), ("world", "all_reduce")},
    "odc": {("dp_shard", "get"), ("world", "barrier"), ("world", "all_reduce")},
}
PP2 = "dpr1-dps1-tp1-pp2-cp1"
#: a hybrid run of two ranks -> (its layout, settings, the records its evaluations must show)
HYBRID = {
    "tp2": ("dpr1-dps1-tp2-pp1-cp1", {}, {("tp", "all_reduce"), ("world", "all_reduce")}),
    "pp2-1f1b": (PP2, {}, {("pp", "send"), ("pp", "recv"), ("world", "all_reduce")}),
    "pp2-gpipe": (PP2, {"train__pp_schedule": "gpipe"}, {("pp", "send"), ("pp", "recv")}),
    "cp2": ("dpr1-dps1-tp1-pp1-cp2", {}, {("cp", "send"), ("cp", "all_reduce")}),
}

#: hybrid layouts of four ranks, two data-parallel shards each, trained `EVERY` steps only
HYBRID_DP = {
    "dpr1-dps2-tp2-pp1-cp1": {("tp", "all_reduce"), ("dp_shard", "all_gather")},
    "dpr1-dps2-tp1-pp2-cp1": {("pp", "send"), ("dp_shard", "all_gather")},
    "dpr1-dps2-tp1-pp1-cp2": {("cp", "send"), ("dp_shard_cp", "all_gather")},
}


def builder() -> ModelBuilder:
    return ModelBuilder(FAMILIES[FAMILY], "tiny", seed=0, kernel="auto")


def data_plan() -> DataPlan:
    vocab = FAMILIES[FAMILY].info("tiny").vocab_size
    return DataPlan(source=MarkovSource(vocab_size=vocab, seed=1), **TINY_DATA)


def config_settings(**over: Any) -> dict:
    s = {
        **DEFAULTS,
        "model.family": FAMILY,
        "data.seq_len": TINY_DATA["seq_len"],
        "data.global_batch": TINY_DATA["global_batch"],
        "data.micro_batch": TINY_DATA["micro_batch"],
    }
    s.update({k.replace("__", "."): v for k, v in over.items()})
    return s


def make_strategy(name: str, rank: int, world: int, layout: Layout | None, **over: Any) -> Any:
    ctx = DistContext(rank, rank, world, torch.device("cpu"), torch.float32)
    if layout is None:
        return STRATEGIES[name].load()(ctx)
    from greenbench.rank.mesh import build_mesh

    mesh = build_mesh(layout, "cpu") if name == "hybrid" else None
    strategy = STRATEGIES[name].load()(ctx, mesh, None, layout)
    strategy.configure(SCHEMA.config(config_settings(strategy=name, **over)))
    return strategy


def train_and_evaluate(
    name: str,
    rank: int,
    world: int,
    layout: Layout | None = None,
    steps: int = STEPS,
    adam: bool = False,
    **over: Any,
) -> dict:
    """Train ``steps`` steps (SGD, or Adam where the weights must move far in few steps),
    evaluating every `EVERY` (and after the last); what each evaluation returned and what it
    recorded."""
    strategy = make_strategy(name, rank, world, layout, **over)
    model = strategy.parallelize(builder())
    schedule = strategy.schedule(next_token_loss)
    params = strategy.parameters(model)
    optimizer = torch.optim.Adam(params, lr=1e-2) if adam else torch.optim.SGD(params, lr=LR)
    plan = data_plan()
    held_out = strategy.assignment.batch(plan.held_out(HELD_OUT), 0)
    evals: list[tuple[float, int]] = []
    calls: set[tuple[str, str]] = set()
    try:
        for step in range(steps + 1):
            if step % EVERY == 0 or step == steps:
                mark = strategy.comm.mark()
                evals.append(schedule.evaluate(model, held_out))
                calls |= {(c.dim, c.op) for c in strategy.comm.since(mark)}
            if step < steps:
                schedule.train_step(model, optimizer, strategy.assignment.batch(plan, step))
        stages = stage_state(strategy) if name == "skippipe" else None
    finally:
        strategy.close()
    return {"evals": evals, "calls": calls, "stages": stages}


def stage_state(strategy: Any) -> dict:
    """What a SkipPipe node holds: its stage, the stage's blocks and their weights."""
    return {
        "stage": strategy.stage,
        "bounds": strategy.bounds,
        "state": {k: v.detach().clone() for k, v in strategy.module.state_dict().items()},
    }


def _worker(rank: int, world: int, port: int, jobs: list[tuple], out: str) -> None:
    """Every job in turn on one process group (one start-up for all of them)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {}
        for key, name, layout, over in jobs:
            layout = Layout.parse(layout) if layout else None
            results[key] = train_and_evaluate(name, rank, world, layout, **over)
        torch.save(results, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def run_ranks(tmp_path: Path, world: int, jobs: list[tuple]) -> dict[str, list[dict]]:
    """Job key -> each rank's results."""
    out = str(tmp_path / "rank")
    spawn(_worker, (world, free_port(), jobs, out), world)
    per_rank = [torch.load(f"{out}.{r}", weights_only=False) for r in range(world)]
    return {key: [ranks[key] for ranks in per_rank] for key, *_ in jobs}


def assert_evaluations_match(ranks: list[dict], reference: list[tuple[float, int]]) -> None:
    """On every rank, every evaluation equals the reference's: tokens exactly, mean loss within
    `ATOL`; every rank returned the same."""
    for rank, result in enumerate(ranks):
        got = result["evals"]
        assert [t for _, t in got] == [t for _, t in reference], f"rank {rank}"
        means = [s / t for s, t in got]
        expected = [s / t for s, t in reference]
        torch.testing.assert_close(means, expected, rtol=0, atol=ATOL, msg=f"rank {rank}")
        assert got == ranks[0]["evals"], f"rank {rank} differs from rank 0"


@pytest.fixture(scope="module")
def reference() -> list[tuple[float, int]]:
    """The single process's evaluations along the same training."""
    return train_and_evaluate("single", 0, 1)["evals"]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """Every two-rank strategy and hybrid layout, run once on one process group."""
    jobs = [(name, name, "", {}) for name in DATA_PARALLEL]
    jobs += [(key, "hybrid", text, over) for key, (text, over, _) in HYBRID.items()]
    return run_ranks(tmp_path_factory.mktemp("evaluate"), 2, jobs)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """The four-rank hybrid layouts, run once on one process group."""
    jobs = [(text, "hybrid", text, {"steps": EVERY}) for text in HYBRID_DP]
    return run_ranks(tmp_path_factory.mktemp("evaluate4"), 4, jobs)


def test_the_reference_evaluates_the_held_out_set_as_it_trains(reference: list):
    plan = data_plan()
    tokens = plan.held_out(HELD_OUT).part(0, 0, 1).global_tokens
    assert len(reference) == STEPS // EVERY + 1
    assert all(t == tokens for _, t in reference)
    means = [s / t for s, t in reference]
    assert len(set(means)) == len(means)  # every evaluation saw other weights
    assert means[-1] < means[0]  # and the training lowered the held-out loss


@pytest.mark.parametrize("name", list(DATA_PARALLEL))
def test_data_parallel_evaluation_matches_one_process(
    two_ranks: dict, reference: list, name: str
) -> None:
    ranks = two_ranks[name]
    assert_evaluations_match(ranks, reference)
    calls = set().union(*(r["calls"] for r in ranks))
    assert DATA_PARALLEL[name] <= calls, sorted(calls)


@pytest.mark.parametrize("key", list(HYBRID))
def test_hybrid_evaluation_matches_one_process(two_ranks: dict, reference: list, key: str):
    ranks = two_ranks[key]
    assert_evaluations_match(ranks, reference)
    calls = set().union(*(r["calls"] for r in ranks))
    assert HYBRID[key][2] <= calls, sorted(calls)


@pytest.mark.parametrize("text", list(HYBRID_DP))
def test_hybrid_with_data_parallel_shards_evaluation_matches_one_process(
    four_ranks: dict, reference: list, text: str
):
    ranks = four_ranks[text]
    assert_evaluations_match(ranks, reference[: len(ranks[0]["evals"])])
    calls = set().union(*(r["calls"] for r in ranks))
    assert HYBRID_DP[text] <= calls, sorted(calls)


# -- SkipPipe: the whole model, whatever the schedule skips --------------------------------------


def evaluate_weights(nodes: list[dict]) -> tuple[float, int]:
    """One process evaluating the weights SkipPipe's ``nodes`` hold, one node per stage put
    together into one whole model (none: the model as every node built it)."""
    source = builder()
    model = source.build(torch.device("cpu"))
    family, layers = FAMILIES[FAMILY], len(source.blocks(model))
    for node in nodes:
        if node["stage"] == 0:
            stage = torch.nn.ModuleDict(
                {
                    "embed": family.pipeline_stage(model, 0, 0, embed=True, head=False),
                    "head": family.pipeline_stage(model, layers, layers, embed=False, head=True),
                }
            )
        else:
            lo, hi = node["bounds"][node["stage"] - 1]
            stage = family.pipeline_stage(model, lo, hi, embed=False, head=False)
        stage.load_state_dict(node["state"])
    single = make_strategy("single", 0, 1, None)
    held_out = single.assignment.batch(data_plan().held_out(HELD_OUT), 0)
    return single.schedule(next_token_loss).evaluate(model, held_out)


def test_skippipe_evaluates_every_stage_as_one_process(tmp_path: Path):
    """Stages 1-2-1; a skipping schedule, so training leaves each microbatch half the blocks;
    node 2 (a replica of stage 1) stops serving at step 2, so its weights fall two steps behind
    and the evaluation must route around it."""
    over = {"skippipe__schedule": "skippipe", "skippipe__fail_node": 2, "skippipe__fail_step": 2}
    jobs = [("skippipe", "skippipe", "dpr1-dps1-tp1-pp4-cp1", {"steps": 4, "adam": True, **over})]
    ranks = run_ranks(tmp_path, 4, jobs)["skippipe"]
    evals = ranks[0]["evals"]
    assert len(evals) == 2  # at initialisation and after the last step
    for rank, result in enumerate(ranks):
        assert result["evals"] == evals, f"rank {rank} differs from node 0"
    states = [r["stages"] for r in ranks]
    assert [s["stage"] for s in states] == [0, 1, 1, 2]
    # node 2 stopped at step 2: its replica of stage 1 fell behind node 1's
    assert any(not torch.equal(v, states[1]["state"][k]) for k, v in states[2]["state"].items())
    initial = evaluate_weights([])
    trained = evaluate_weights([states[0], states[1], states[3]])
    for got, expected in zip(evals, (initial, trained), strict=True):
        assert got[1] == expected[1]
        assert abs(got[0] / got[1] - expected[0] / expected[1]) < ATOL, (got, expected)
    # the check can tell: the weights moved, and the stopped replica's would evaluate otherwise
    stale = evaluate_weights([states[0], states[2], states[3]])
    for other in (initial, stale):
        assert abs(other[0] / other[1] - trained[0] / trained[1]) > 10 * ATOL
