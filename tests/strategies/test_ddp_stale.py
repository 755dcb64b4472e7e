"""Bounded-staleness data parallelism (``ddp.staleness``) does the arithmetic it claims.

Two real gloo ranks train the tiny Transformer a few SGD steps: with staleness 0 the step is
DDP's (same parameters as torch's DDP), with staleness s it is "apply at step t the average of
step t - s's gradients, nothing in the first s steps", as a single process computes it from the
two ranks' shards; the replicas stay equal, each waited all-reduce is recorded with the
parameters' bytes, and the reductions still in flight are drained on close. Combining it with
another communication-saving method is refused at the command line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from helpers import TINY_DATA, free_port, spawn

from greenbench.cli import main
from greenbench.data import DataPlan, MarkovSource
from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.device import DistContext
from greenbench.distributed.link import EmulatedLink
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.sources.builtin import next_token_loss
from greenbench.strategies.assignment import DataParallelShare
from greenbench.strategies.ddp import DDP
from greenbench.strategies.ddp_settings import DDPSettings
from greenbench.strategies.ddp_stale import StaleSchedule, replicate
from greenbench.strategies.schedule import StepSchedule

STEPS = 4
WORLD = 2
# SGD: the update is linear in the gradient, so a gradient applied a step early or late, or
# a wrong average, shows at full size (the steps move the parameters by ~1e-2)
LR = 0.5
FAMILY = "transformer"


def builder() -> ModelBuilder:
    return ModelBuilder(FAMILIES[FAMILY], "tiny", seed=0, kernel="auto")


def plan() -> DataPlan:
    return DataPlan(source=MarkovSource(vocab_size=builder().info.vocab_size, seed=1), **TINY_DATA)


def context(rank: int, world: int) -> DistContext:
    return DistContext(
        rank=rank, local_rank=rank, world_size=world, device=torch.device("cpu"),
        dtype=torch.float32,
    )  # fmt: skip


def params_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    inner = getattr(model, "module", model)
    return {name: p.detach().clone() for name, p in inner.named_parameters()}


def train_ddp(rank: int, staleness: int, link: EmulatedLink | None = None) -> dict:
    """``steps`` SGD steps under the DDP strategy with ``ddp.staleness`` (0: torch's DDP)."""
    torch.manual_seed(0)
    strategy = DDP(context(rank, WORLD))
    strategy.settings = DDPSettings(staleness=staleness)
    if link is not None:
        strategy.link = link
    model = strategy.parallelize(builder())
    schedule = strategy.schedule(next_token_loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    data = plan()
    strategy.comm.take()
    for step in range(STEPS):
        schedule.train_step(model, optimizer, strategy.assignment.batch(data, step))
    calls = [(c.dim, c.op, c.nbytes) for c in strategy.comm.take()]
    held_out = schedule.evaluate(model, strategy.assignment.batch(data, 100))
    strategy.close()
    drained = strategy.stale is None or not strategy.stale.in_flight
    return {
        "params": params_of(model),
        "calls": calls,
        "eval": held_out,
        "drained": drained,
        "wrapped": type(model).__name__,
    }


def train_stale(rank: int, staleness: int) -> dict:
    """The bounded-staleness schedule itself (staleness 0 included, which DDP's strategy
    leaves to torch's DDP)."""
    torch.manual_seed(0)
    ctx = context(rank, WORLD)
    model = replicate(builder().build(ctx.device), None)
    schedule = StaleSchedule(ctx, CommRecorder(ctx.device), next_token_loss, staleness=staleness)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    data, share = plan(), DataParallelShare(rank, WORLD)
    for step in range(STEPS):
        schedule.train_step(model, optimizer, share.batch(data, step))
    schedule.close()
    return {"params": params_of(model)}


def _rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {
            "ddp": train_ddp(rank, 0),
            "s0": train_stale(rank, 0),
            "s1": train_ddp(rank, 1),
            "s1-link": train_ddp(rank, 1, EmulatedLink(latency_s=0.002, bytes_per_s=1e9)),
            "s2": train_stale(rank, 2),
        }
        torch.save(results, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def reference(staleness: int) -> dict[str, torch.Tensor]:
    """One process: each step's gradient is the sum of the two ranks' shards' gradients (each
    scaled by one over the minibatch's tokens, as the ranks' average is); step t applies step
    t - staleness's, and the first ``staleness`` steps apply none."""
    torch.manual_seed(0)
    ctx = context(0, 1)
    model = builder().build(ctx.device)
    schedule = StepSchedule(ctx, CommRecorder(ctx.device), next_token_loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    data = plan()
    averaged: list[list[torch.Tensor]] = []
    for step in range(STEPS):
        shards = []
        for rank in range(WORLD):
            optimizer.zero_grad(set_to_none=True)
            schedule.forward_backward(model, DataParallelShare(rank, WORLD).batch(data, step))
            shards.append([p.grad.clone() for p in model.parameters()])
        averaged.append([sum(gs[1:], gs[0]) for gs in zip(*shards, strict=True)])
        if step >= staleness:
            for p, g in zip(model.parameters(), averaged[step - staleness], strict=True):
                p.grad = g
            optimizer.step()
    return params_of(model)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("stale")
    spawn(_rank, (WORLD, free_port(), str(out)), WORLD)
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]


def assert_params_equal(got: dict, want: dict, atol: float, what: str) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=0, atol=atol, msg=f"{what}: {name}")


@pytest.mark.slow
def test_staleness_zero_is_ddp(ranks: list[dict]):
    assert ranks[0]["ddp"]["wrapped"] == "DistributedDataParallel"
    for r in ranks:
        assert_params_equal(r["s0"]["params"], r["ddp"]["params"], 1e-6, "s=0 vs DDP")


@pytest.mark.slow
@pytest.mark.parametrize("run", ["s1", "s1-link", "s2"])
def test_staleness_applies_the_average_of_s_steps_before(ranks: list[dict], run: str):
    staleness = int(run[1])
    want = reference(staleness)
    for r in ranks:
        assert_params_equal(r[run]["params"], want, 1e-6, run)
    # the replicas are equal, and staleness changed the result (it is not DDP's)
    assert_params_equal(ranks[1][run]["params"], ranks[0][run]["params"], 0.0, "replicas")
    moved = max((want[n] - ranks[0]["ddp"]["params"][n]).abs().max() for n in want)
    assert moved > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("run", ["s1", "s1-link"])
def test_each_waited_all_reduce_is_recorded_with_the_parameters_bytes(ranks: list[dict], run: str):
    params = ranks[0][run]["params"]
    nbytes = sum(p.numel() * p.element_size() for p in params.values())
    for r in ranks:
        result = r[run]
        assert result["wrapped"] != "DistributedDataParallel"
        # one per step but the first (no averaged gradient yet to wait for)
        assert result["calls"] == [("dp_replicate", "all_reduce", nbytes)] * (STEPS - 1)
        assert result["drained"]


@pytest.mark.slow
def test_evaluation_sees_equal_replicas(ranks: list[dict]):
    (loss0, tokens0), (loss1, tokens1) = ranks[0]["s1"]["eval"], ranks[1]["s1"]["eval"]
    assert loss0 == loss1 and tokens0 == tokens1 and loss0 > 0


def test_staleness_with_compression_is_refused_on_the_command_line(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    args = ["run", "--workload", "data-parallel", "--device", "cpu", "--set", "strategy=ddp"]
    args += ["--set", "ddp.staleness=1", "--set", "ddp.compress=bf16", "--db", str(db)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "one communication-saving method at a time" in line
    assert "ddp.staleness=1" in line and "ddp.compress=bf16" in line
    assert not db.exists()
