"""A training step synchronises ranks only where its stock PyTorch counterpart does.

Two real gloo processes train two steps under ``ddp``, ``fsdp`` and ``hybrid`` (its FSDP
layout, ``dps2``). In each worker every synchronising call of `torch.distributed` is wrapped:
its functions (barriers, collectives, point-to-point calls, DDP's buffer broadcast) and the
process group's own methods, which FSDP2 or DDP could call directly. Only the outermost call is
counted (``dist.all_reduce`` calling the group's ``allreduce`` is one call), and only while a
step runs. The test then holds each step to what stock PyTorch issues:

- DDP: its bucket all-reduces (together they reduce every gradient element once, on the last
  microbatch) and, for a model with buffers, its buffer broadcast before a forward that syncs
  (``broadcast_buffers=True``, DDP's default); the recorder holds each broadcast and one
  all-reduce call per step (the time backward spent blocked after the last bucket,
  `greenbench.strategies.ddp`);
- FSDP2 (``fsdp`` and ``hybrid`` over ``dp_shard``): only all-gathers and reduce-scatters, one
  reduce-scatter per sharded module and microbatch, every one of them in the recorder;
- nowhere a barrier.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from helpers import TINY_DATA, free_port, spawn
from torch.distributed.fsdp import FSDPModule

from greenbench.data import DataPlan, MarkovSource
from greenbench.distributed.device import DistContext
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.settings import SCHEMA
from greenbench.sources.builtin import next_token_loss
from greenbench.strategies import STRATEGIES
from greenbench.vocabulary import Layout

STEPS = 2
WORLD = 2
DATA = TINY_DATA
MICROBATCHES = DATA["global_batch"] // WORLD // DATA["micro_batch"]
FAMILIES_CHECKED = ("transformer", "mamba")  # with buffers (rotary frequencies) and without
STRATEGIES_CHECKED = ("ddp", "fsdp", "hybrid")
HYBRID_LAYOUT = "dpr1-dps2-tp1-pp1-cp1"

#: torch.distributed functions that synchronise ranks (those this torch has are wrapped)
FUNCTIONS = (
    "barrier",
    "monitored_barrier",
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_coalesced",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "reduce",
    "broadcast",
    "broadcast_object_list",
    "_broadcast_coalesced",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
)
#: the process group's methods (what any of the above ends in, or what is called directly)
GROUP_METHODS = (
    "barrier",
    "monitored_barrier",
    "allreduce",
    "allreduce_coalesced",
    "allgather",
    "_allgather_base",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "all_gather_single",
    "all_gather_single_coalesced",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced",
    "reduce",
    "broadcast",
    "alltoall",
    "alltoall_base",
    "all_to_all_single",
    "gather",
    "scatter",
    "send",
    "recv",
    "recv_anysource",
)
#: the kind of each counted call
KIND = {
    "all_gather_into_tensor": "all_gather",
    "all_gather_single": "all_gather",
    "_allgather_base": "all_gather",
    "allgather": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "allreduce": "all_reduce",
    "monitored_barrier": "barrier",
}


class Counter:
    """The synchronising calls made while `counting` is on, outermost calls only."""

    def __init__(self) -> None:
        self.on = False
        self.calls: list[tuple[str, int]] = []
        self.depth = threading.local()

    def wrap(self, name: str, fn: Callable[..., Any], *, method: bool) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self.depth, "n", 0)
            if self.on and depth == 0:
                tensors = args[1:] if method else args
                self.calls.append((name, _numel(tensors, kwargs)))
            self.depth.n = depth + 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth.n = depth

        return counted

    @contextmanager
    def counting(self) -> Iterator[list[tuple[str, int]]]:
        start = len(self.calls)
        self.on = True
        step: list[tuple[str, int]] = []
        try:
            yield step
        finally:
            self.on = False
            step.extend(self.calls[start:])


def _numel(args: tuple, kwargs: dict) -> int:
    """Elements of the call's first tensor (or tensors), for an all-reduce's size."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.numel()
        if isinstance(value, list | tuple) and value and isinstance(value[0], torch.Tensor):
            return sum(t.numel() for t in value)
    return 0


def install(counter: Counter) -> None:
    """Wrap torch.distributed's synchronising functions and the process group's methods."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    for name in FUNCTIONS:
        for module in (dist, distributed_c10d):
            fn = getattr(module, name, None)
            if fn is not None:
                setattr(module, name, counter.wrap(name, fn, method=False))
    group = torch._C._distributed_c10d.ProcessGroup
    for name in GROUP_METHODS:
        fn = getattr(group, name, None)
        if fn is not None:
            setattr(group, name, counter.wrap(name, fn, method=True))


def train(counter: Counter, strategy: str, family: str, rank: int) -> dict[str, Any]:
    from greenbench.rank.mesh import build_mesh

    torch.manual_seed(0)
    builder = ModelBuilder(FAMILIES[family], "tiny", seed=0, kernel="auto")
    ctx = DistContext(rank, rank, WORLD, torch.device("cpu"), torch.float32)
    if strategy == "hybrid":
        layout = Layout.parse(HYBRID_LAYOUT)
        strat = STRATEGIES["hybrid"].load()(ctx, build_mesh(layout, "cpu"), None, layout)
        strat.configure(
            SCHEMA.config(
                {
                    "model.family": family,
                    "train.pp_schedule": "1f1b",
                    "data.seq_len": DATA["seq_len"],
                    "data.micro_batch": DATA["micro_batch"],
                    "data.global_batch": DATA["global_batch"],
                }
            )
        )
    else:
        strat = STRATEGIES[strategy].load()(ctx)
    model = strat.parallelize(builder)
    schedule = strat.schedule(next_token_loss)
    optimizer = torch.optim.SGD(strat.parameters(model), lr=0.1)
    plan = DataPlan(source=MarkovSource(vocab_size=builder.info.vocab_size, seed=1), **DATA)
    steps, recorded = [], []
    for step in range(STEPS):
        batch = strat.assignment.batch(plan, step)
        mark = strat.comm.mark()
        with counter.counting() as calls:
            schedule.train_step(model, optimizer, batch)
        steps.append(calls)
        recorded.append([(c.dim, c.op) for c in strat.comm.since(mark)])
        assert len(batch.microbatches) == MICROBATCHES
    inner = getattr(model, "module", model)
    return {
        "steps": steps,
        "recorded": recorded,
        "param_numel": sum(p.numel() for p in inner.parameters()),
        "buffers": sum(1 for _ in inner.buffers()),
        "sharded_modules": sum(1 for m in inner.modules() if isinstance(m, FSDPModule)),
    }


def _worker(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    counter = Counter()
    install(counter)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        results = {
            (strategy, family): train(counter, strategy, family, rank)
            for family in FAMILIES_CHECKED
            for strategy in STRATEGIES_CHECKED
        }
        torch.save(results, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("sync") / "calls"
    spawn(_worker, (free_port(), str(out)), WORLD)
    return [torch.load(f"{out}.{rank}") for rank in range(WORLD)]


def kinds(calls: list[tuple[str, int]]) -> list[str]:
    return [KIND.get(name, name) for name, _ in calls]


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES_CHECKED)
@pytest.mark.parametrize("strategy", STRATEGIES_CHECKED)
def test_no_barrier_in_a_step(counted: list[dict], strategy: str, family: str):
    for rank, results in enumerate(counted):
        for step, calls in enumerate(results[strategy, family]["steps"]):
            assert "barrier" not in kinds(calls), f"rank {rank} step {step}: {calls}"


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES_CHECKED)
def test_ddp_step_holds_only_its_bucket_all_reduces(counted: list[dict], family: str):
    for rank, results in enumerate(counted):
        run = results["ddp", family]
        for step, calls in enumerate(run["steps"]):
            where = f"rank {rank} step {step}: {calls}"
            reduces = [n for name, n in calls if KIND.get(name, name) == "all_reduce"]
            broadcasts = [name for name, _ in calls if name == "_broadcast_coalesced"]
            assert reduces, where
            assert len(reduces) + len(broadcasts) == len(calls), where
            # the buckets together hold every gradient element once
            assert sum(reduces) == run["param_numel"], where
            # stock DDP broadcasts a module's buffers before a forward that syncs
            # (broadcast_buffers, its default), and only where the module has buffers
            assert bool(broadcasts) == bool(run["buffers"]), where
            assert len(broadcasts) <= MICROBATCHES, where
            # the recorder: each buffer broadcast, then one call for the time blocked in the
            # all-reduces
            assert run["recorded"][step] == [("dp_replicate", "broadcast")] * len(broadcasts) + [
                ("dp_replicate", "all_reduce")
            ], where


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES_CHECKED)
@pytest.mark.parametrize("strategy", ["fsdp", "hybrid"])
def test_fsdp_step_holds_only_fsdp2_collectives(counted: list[dict], strategy: str, family: str):
    for rank, results in enumerate(counted):
        run = results[strategy, family]
        modules = run["sharded_modules"]
        assert modules > 1  # the blocks and the root
        for step, calls in enumerate(run["steps"]):
            where = f"rank {rank} step {step}: {calls}"
            seen = kinds(calls)
            assert set(seen) == {"all_gather", "reduce_scatter"}, where
            # gradients are reduce-scattered for every microbatch; parameters gathered at least
            # as often (forward, and again for backward where resharded after forward)
            assert seen.count("reduce_scatter") == modules * MICROBATCHES, where
            assert seen.count("all_gather") >= modules * MICROBATCHES, where
            # and every one of them went through the recorder, in order
            assert [op for _, op in run["recorded"][step]] == seen, where
