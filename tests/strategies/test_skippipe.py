"""The SkipPipe runner on four real gloo ranks: a data node, stage 1 on two nodes, stage 2 on one.

A full pipeline (every microbatch through every stage, stage 1's replicas taking turns and
summing their gradients) trains as one process does; a skipping run trains, visits fewer
blocks, and records its messages; a node that stops serving mid-run is routed around and the
run finishes.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers import free_port, spawn

from greenbench.data import DataPlan, MarkovSource
from greenbench.distributed.device import DistContext
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.settings import SCHEMA
from greenbench.sources.builtin import next_token_loss
from greenbench.spec import DEFAULTS
from greenbench.strategies import STRATEGIES
from greenbench.strategies.skippipe.plan import fill_drain_order
from greenbench.strategies.skippipe.routes import (
    Costs,
    aware_paths,
    even_paths,
    make_plan,
    nodes_by_stage,
    stage_layers,
)
from greenbench.vocabulary import Layout

STEPS = 3
DATA = dict(
    lengths="fixed", seq_len=32, global_batch=8, micro_batch=1, balance="same-count",
    cost_model="linear", scale=1.0, seed=3,
)  # fmt: skip


def settings(family: str, **over: object) -> dict:
    s = {
        **DEFAULTS,
        "model.family": family,
        "strategy": "skippipe",
        "data.seq_len": DATA["seq_len"],
        "data.global_batch": DATA["global_batch"],
        "data.micro_batch": DATA["micro_batch"],
    }
    s.update({k.replace("__", "."): v for k, v in over.items()})
    return s


def train(family: str, rank: int, world: int, over: dict) -> dict:
    builder = ModelBuilder(FAMILIES[family], "tiny", seed=0, kernel="auto")
    ctx = DistContext(rank, rank, world, torch.device("cpu"), torch.float32)
    if world == 1:
        strategy = STRATEGIES["single"].load()(ctx)
    else:
        strategy = STRATEGIES["skippipe"].load()(ctx, None, None, Layout(pp=world))
        strategy.configure(SCHEMA.config(settings(family, **over)))
    model = strategy.parallelize(builder)
    schedule = strategy.schedule(next_token_loss)
    optimizer = torch.optim.SGD(strategy.parameters(model), lr=0.5)
    plan = DataPlan(source=MarkovSource(vocab_size=builder.info.vocab_size, seed=1), **DATA)
    losses, fractions = [], []
    for step in range(STEPS):
        loss, _ = schedule.train_step(model, optimizer, strategy.assignment.batch(plan, step))
        losses.append(loss)
        fractions.append(strategy.flops_fraction)
    calls = {(c.dim, c.op) for c in strategy.comm.take()}
    paths = [strategy.plan_for(step).paths for step in range(STEPS)] if world > 1 else []
    return {"losses": losses, "calls": calls, "fractions": fractions, "paths": paths}


def _worker(rank: int, port: int, family: str, over: dict, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=4)
    try:
        torch.save(train(family, rank, 4, over), f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def run(tmp_path: Path, family: str, **over: object) -> list[dict]:
    out = str(tmp_path / "rank")
    spawn(_worker, (free_port(), family, over, out), 4)
    return [torch.load(f"{out}.{r}", weights_only=False) for r in range(4)]


def test_even_paths_share_stages_and_replicas_evenly():
    stages = nodes_by_stage((1, 2, 1), set())
    paths, data = even_paths(stages, 8, 0.5)
    assert all(len(p) == 1 for p in paths) and set(data) == {0}
    visits = [n for p in paths for n in p]
    assert visits.count(3) == 4 and visits.count(1) == visits.count(2) == 2
    full, _ = even_paths(stages, 4, 0.0)
    assert full == ((1, 3), (2, 3), (1, 3), (2, 3))


COSTS = Costs(
    layers_per_stage=2, forward_flops_per_sample_layer=4e8, data_node_flops_per_sample=1.3e8,
    activation_bytes_per_sample=1 << 18, samples_per_microbatch=1, latency_ms=10.0,
    bandwidth_gbps=1.0, slowdown={},
)  # fmt: skip


def test_a_removed_node_gets_no_work_and_fill_drain_orders_every_task():
    plan = make_plan(
        (1, 2, 1), microbatches=4, skip=0.0, schedule="full", seed=0, removed={2}, costs=COSTS
    )
    assert 2 not in plan.order and all(p == (1, 3) for p in plan.paths)
    again = fill_drain_order(plan.stage_nodes, plan.paths, plan.data_node)
    assert [k for k, _ in again.order[0]] == ["E"] * 4 + ["L"] * 4 + ["G"] * 4


def test_skippipe_routes_around_a_slow_replica():
    costs = Costs(
        layers_per_stage=2, forward_flops_per_sample_layer=4e8, data_node_flops_per_sample=1.3e8,
        activation_bytes_per_sample=1 << 18, samples_per_microbatch=1, latency_ms=10.0,
        bandwidth_gbps=1.0, slowdown={2: 3.0},
    )  # fmt: skip
    even = make_plan((1, 2, 1), microbatches=8, skip=0.5, schedule="skippipe", seed=0,
                     removed=set(), costs=COSTS)  # fmt: skip
    around = make_plan((1, 2, 1), microbatches=8, skip=0.5, schedule="skippipe", seed=0,
                       removed=set(), costs=costs)  # fmt: skip
    visits = [n for p in around.paths for n in p]
    assert visits.count(2) < [n for p in even.paths for n in p].count(2)


STRAGGLER = Costs(
    layers_per_stage=2, forward_flops_per_sample_layer=4e8, data_node_flops_per_sample=1.3e8,
    activation_bytes_per_sample=1 << 18, samples_per_microbatch=1, latency_ms=10.0,
    bandwidth_gbps=1.0, slowdown={2: 3.0},
)  # fmt: skip


def plan_of(schedule: str, counts=(1, 2, 1), costs=STRAGGLER, skip=0.5, seed=0, mbs=8):
    return make_plan(counts, microbatches=mbs, skip=skip, schedule=schedule, seed=seed,
                     removed=set(), costs=costs)  # fmt: skip


def test_the_straggler_aware_full_pipeline_never_sends_work_to_the_straggler():
    aware = plan_of("full-aware")
    assert all(p == (1, 3) for p in aware.paths)  # every stage, stage 1 only on node 1
    assert aware.order[2] == () and aware.stage_nodes == ((0,), (1, 2), (3,))  # still summed
    assert [k for k, _ in aware.order[1]] == ["F"] * 8 + ["B"] * 8  # the same fill-drain order
    plain = plan_of("full")
    assert [n for p in plain.paths for n in p].count(2) == 4  # the plain one feeds it in turn
    even = plan_of("full-aware", costs=COSTS)  # no straggler: the plain full pipeline's plan
    assert even.paths == plan_of("full", costs=COSTS).paths
    # a stage whose only replica is slow keeps it: every microbatch still visits every stage
    alone = plan_of("full-aware", costs=replace(STRAGGLER, slowdown={3: 3.0}))
    assert all(p == (1, 3) or p == (2, 3) for p in alone.paths)
    stages = nodes_by_stage((1, 3, 2), set())  # several healthy replicas take turns
    paths, _ = aware_paths(stages, 6, {2, 4})
    assert [p[0] for p in paths] == [1, 3, 1, 3, 1, 3] and {p[1] for p in paths} == {5}


def test_random_skip_is_seeded_and_keeps_the_skip_ratio():
    for counts, skip, visits in (((1, 2, 1), 0.5, 1), ((1, 1, 1, 1, 1), 0.5, 2),
                                 ((2, 2, 1, 2, 1), 0.25, 3)):  # fmt: skip
        costs = replace(STRAGGLER, slowdown={})
        plans = [plan_of("random", counts, costs, skip, seed) for seed in (0, 0, 1, 2, 3)]
        assert plans[0] == plans[1]  # the same seed, the same plan
        assert len({p.paths for p in plans[1:]}) > 1  # another seed, other stages or nodes
        for plan in plans:
            assert all(len(p) == visits for p in plan.paths)  # round((S-1)(1-skip)) stages
            stages = [plan.stage_of(n) for p in plan.paths for n in p]
            assert len(set(stages)) == len(counts) - 1  # every stage shares the visits
            assert max(stages.count(s) for s in set(stages)) - min(
                stages.count(s) for s in set(stages)) <= 1  # fmt: skip
            for path in plan.paths:
                assert len({plan.stage_of(n) for n in path}) == len(path)  # never twice


def test_the_visited_share_is_the_token_block_work_the_paths_ran():
    plan = plan_of("random", (1, 1, 1, 1, 1), replace(STRAGGLER, slowdown={}), 0.5, 4)
    bounds = stage_layers(6, 4)  # 2, 2, 1, 1 blocks
    layers = {s + 1: hi - lo for s, (lo, hi) in enumerate(bounds)} | {0: 0}
    tokens = [10, 0, 30, 40, 5, 5, 5, 5]
    run = 0
    for t, path in zip(tokens, plan.paths, strict=True):
        blocks = [b for n in path for b in range(*bounds[plan.stage_of(n) - 1])]
        assert len(blocks) == len(set(blocks))
        run += t * len(blocks)
    assert plan.visited_share(layers, 6, tokens) == pytest.approx(run / (sum(tokens) * 6))
    assert plan.visited_share(layers, 6, [0] * 8) == plan.visited_fraction(layers, 6)
    assert plan_of("full-aware").visited_share({0: 0, 1: 2, 2: 2}, 4, [1] * 8) == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("family", ["transformer", "mamba"])
def test_a_full_pipeline_trains_as_one_process(tmp_path: Path, family: str):
    reference = train(family, 0, 1, {})["losses"]
    ranks = run(tmp_path, family, skippipe__schedule="full")
    torch.testing.assert_close(ranks[0]["losses"], reference, rtol=1e-4, atol=1e-4)
    calls = set().union(*(r["calls"] for r in ranks))
    assert {("pp", "send"), ("pp", "recv"), ("replica", "all_reduce")} <= calls
    assert ranks[0]["fractions"] == [1.0] * STEPS


@pytest.mark.slow
def test_skipping_half_the_stages_trains_on_half_the_blocks_with_emulated_links(tmp_path: Path):
    ranks = run(
        tmp_path, "transformer", emulate__link_latency_ms=2.0, emulate__link_bandwidth_gbps=10.0
    )
    losses = ranks[0]["losses"]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert ranks[0]["fractions"] == [0.5] * STEPS
    for paths, share in zip(ranks[0]["paths"], ranks[0]["fractions"], strict=True):
        ran = [2 * len(path) for path in paths]  # each stage holds 2 of the 4 blocks
        assert share == sum(ran) / (len(paths) * 4)  # every microbatch the same tokens
    assert ("pp", "link_delay") in ranks[1]["calls"]
    assert all(r["losses"] == [0.0] * STEPS for r in ranks[1:])  # only the data node counts


@pytest.mark.slow
def test_a_node_that_stops_serving_is_routed_around_and_the_run_finishes(tmp_path: Path):
    ranks = run(
        tmp_path, "transformer", skippipe__schedule="full", skippipe__fail_node=2,
        skippipe__fail_step=1,
    )  # fmt: skip
    assert len(ranks[0]["losses"]) == STEPS and all(x > 0 for x in ranks[0]["losses"])
    assert ("pp", "send") in ranks[2]["calls"]  # it served in step 0
    reference = train("transformer", 0, 1, {})["losses"]
    torch.testing.assert_close(ranks[0]["losses"], reference, rtol=1e-4, atol=1e-4)
