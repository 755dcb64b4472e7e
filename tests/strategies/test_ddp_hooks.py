"""DDP's communication hooks (``ddp.compress``): compressed gradients train as plain DDP does
within their precision, the bytes recorded are those actually reduced, PowerSGD's error feedback
works, an emulated link delays each reduction by its bytes' time, and a run that cannot use
them is refused.

Two real gloo processes train the tiny Transformer a few SGD steps under each hook, several
configurations per process group (one spawn each test)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from helpers import TINY_DATA, free_port, spawn
from torch.nn.parallel import DistributedDataParallel

import greenbench.strategies.ddp as ddp_module
from greenbench.cli import main
from greenbench.data import DataPlan, MarkovSource
from greenbench.distributed.device import DistContext
from greenbench.distributed.link import EmulatedLink
from greenbench.errors import SpecError
from greenbench.models import FAMILIES, ModelBuilder, build_model, model_info
from greenbench.sources.builtin import next_token_loss
from greenbench.strategies.ddp import DDP
from greenbench.strategies.ddp_settings import (
    MIN_COMPRESSION_RATE,
    DDPSettings,
    check_powersgd_rank,
    compressed,
    largest_rank,
    model_matrices,
)

WORLD = 2
FP32 = 4  # bytes of a float32 gradient element
#: an emulated link slow enough that its delay dominates a tiny model's all-reduce on one host
LINK = EmulatedLink(latency_s=0.005, bytes_per_s=2e9 / 8)


def train(
    rank: int, settings: DDPSettings, steps: int, *, lr: float, link: EmulatedLink | None = None,
    error_feedback: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Train the tiny Transformer ``steps`` SGD steps under ``settings``; its parameters, each
    step's recorded all-reduce (bytes, seconds) and bucket count, and PowerSGD's errors."""
    torch.manual_seed(0)
    builder = ModelBuilder(FAMILIES["transformer"], "tiny", seed=0, kernel="auto")
    ctx = DistContext(rank, rank, WORLD, torch.device("cpu"), torch.float32)
    strat = DDP(ctx)
    strat.settings, strat.link = settings, link or EmulatedLink()
    model = strat.parallelize(builder)
    if not error_feedback:
        strat.hook_state.use_error_feedback = False
    schedule = strat.schedule(next_token_loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    plan = DataPlan(source=MarkovSource(vocab_size=builder.info.vocab_size, seed=1), **TINY_DATA)
    record: dict[str, Any] = {"calls": [], "buckets": [], "errors": []}
    for step in range(steps):
        schedule.train_step(model, optimizer, strat.assignment.batch(plan, step))
        (call,) = [c for c in strat.comm.take() if c.op == "all_reduce"]
        record["calls"].append((call.nbytes, call.seconds))
        record["buckets"].append(strat.buckets.count)
        errors = getattr(strat.hook_state, "error_dict", {})
        record["errors"].append([e.abs().sum().item() for e in errors.values()])
    record["params"] = {n: p.detach().clone() for n, p in model.module.named_parameters()}
    record["shapes"] = [tuple(p.shape) for p in model.module.parameters()]
    return record


def _worker(rank: int, port: int, runs: dict[str, dict[str, Any]], out: str, buckets: str) -> None:
    import torch.distributed as dist

    if buckets == "one":  # DDP's first bucket as large as the others: the tiny model fits one
        dist._DEFAULT_FIRST_BUCKET_BYTES = 25 * 2**20
    elif buckets == "many":  # 1 MiB buckets: a dozen of them
        ddp_module.DistributedDataParallel = functools.partial(
            DistributedDataParallel, bucket_cap_mb=1
        )
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        results = {name: train(rank, **kwargs) for name, kwargs in runs.items()}
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


def run_ranks(
    tmp_path: Path, runs: dict[str, dict[str, Any]], *, buckets: str = "default"
) -> dict[str, dict[str, Any]]:
    """``runs`` (name: `train`'s arguments) on two gloo ranks, DDP's buckets as stock DDP makes
    them, one, or "many"."""
    out = tmp_path / "results.pt"
    spawn(_worker, (free_port(), runs, str(out), buckets), WORLD)
    return torch.load(out)


def _moved(result: dict[str, Any], name: str) -> torch.Tensor:
    return result["params"][name] - build_model("transformer", "tiny", seed=0).state_dict()[name]


@pytest.mark.slow
def test_half_precision_compression_trains_as_plain_ddp_within_its_precision(tmp_path: Path):
    runs = {
        c: dict(settings=DDPSettings(compress=c), steps=3, lr=1.0) for c in ("none", "bf16", "fp16")
    }
    got = run_ranks(tmp_path, runs)
    plain = got["none"]
    initial = build_model("transformer", "tiny", seed=0).state_dict()
    # a bucket of n gradients reduces n half-precision elements: half the plain bytes
    for compress in ("bf16", "fp16"):
        for (half, _), (full, _) in zip(got[compress]["calls"], plain["calls"], strict=True):
            assert half * 2 == full
    for compress, eps in (("bf16", 2.0**-8), ("fp16", 2.0**-11)):
        differs = False
        for name, ref in plain["params"].items():
            moved = (ref - initial[name]).abs().max().item()
            diff = (got[compress]["params"][name] - ref).abs().max().item()
            # the steps' updates agree to the format's rounding (a few units of it over three
            # steps at lr 1), far below the update itself, the size a wrong reduction shows at
            assert diff <= 8 * eps * moved + 1e-7, (compress, name, diff, moved)
            differs |= diff > 0
        assert differs, f"{compress}: no parameter differs from plain DDP's: nothing was cast"


def powersgd(rank: int) -> DDPSettings:
    return DDPSettings(compress="powersgd", powersgd_rank=rank)


def expected_powersgd_bytes(shapes: list[tuple[int, ...]], rank: int) -> int:
    """What PowerSGD reduces per step, from the parameter shapes: P (n×r) and Q (m×r) of every
    matrix, every vector whole."""
    total = 0
    for shape in shapes:
        if len(shape) < 2:
            total += shape[0] * FP32
            continue
        n, m = shape[0], int(torch.Size(shape[1:]).numel())
        assert rank < min(n, m) and (n + m) * rank * MIN_COMPRESSION_RATE < n * m  # compressed
        total += (n + m) * rank * FP32
    return total


@pytest.mark.slow
def test_powersgd_records_its_factors_bytes_and_its_error_feedback_works(tmp_path: Path):
    steps, start = 4, 2
    runs = {f"r{r}": dict(settings=powersgd(r), steps=steps, lr=0.5) for r in (1, 4)}
    runs["r4-no-feedback"] = {**runs["r4"], "error_feedback": False}
    got = run_ranks(tmp_path, runs)
    shapes = got["r1"]["shapes"]
    full = sum(int(torch.Size(s).numel()) for s in shapes) * FP32
    for r in (1, 4):
        nbytes = [n for n, _ in got[f"r{r}"]["calls"]]
        # plain all-reduces of the whole buckets before start_powerSGD_iter, then the factors
        assert nbytes[:start] == [full] * start
        assert nbytes[start:] == [expected_powersgd_bytes(shapes, r)] * (steps - start)
        assert nbytes[start] < full / 20
    # error feedback: what compression lost is kept (non-zero) once it compresses, and adding
    # it back into the next step's gradients changes where training goes
    errors = got["r4"]["errors"]
    assert errors[start - 1] == [] and errors[start] and all(e > 0 for e in errors[start])
    assert all(e > 0 for e in errors[-1])
    with_feedback, without = got["r4"]["params"], got["r4-no-feedback"]["params"]
    assert any(not torch.equal(with_feedback[n], without[n]) for n in with_feedback)
    # the first compressed step is the same with and without (no error to add back yet)
    assert got["r4"]["calls"][start][0] == got["r4-no-feedback"]["calls"][start][0]


@pytest.mark.slow
def test_powersgd_over_many_buckets_keeps_the_ranks_collectives_in_step(tmp_path: Path):
    # a bucket's P and Q all-reduces are issued from gloo's threads: the hook reduces the
    # buckets one after another so that every rank issues them in the same order
    steps, start = 4, 2
    got = run_ranks(
        tmp_path, {"r4": dict(settings=powersgd(4), steps=steps, lr=0.5)}, buckets="many"
    )
    result = got["r4"]
    assert min(result["buckets"][1:]) > 4
    expected = expected_powersgd_bytes(result["shapes"], 4)
    assert [n for n, _ in result["calls"][start:]] == [expected] * (steps - start)


@pytest.mark.slow
def test_an_emulated_link_delays_each_reduction_by_its_bytes(tmp_path: Path):
    steps = 3  # the third is PowerSGD's first compressed step
    runs = {
        c: dict(settings=DDPSettings(compress=c), steps=steps, lr=0.5, link=LINK)
        for c in ("none", "bf16", "powersgd")
    }
    got = run_ranks(tmp_path, runs, buckets="one")
    for compress, result in got.items():
        # one bucket: the whole reduction comes after it is ready, so the recorded tail holds
        # the link's delay of every byte reduced (PowerSGD's three all-reduces one after the
        # other, each paying the latency: at least one ring all-reduce of their bytes)
        assert result["buckets"] == [1] * steps, compress
        for nbytes, seconds in result["calls"]:
            assert seconds >= LINK.all_reduce_s(nbytes, WORLD), compress
    # compression's smaller bytes are a shorter delay
    assert got["bf16"]["calls"][-1][0] * 2 == got["none"]["calls"][-1][0]
    assert got["powersgd"]["calls"][-1][0] < got["bf16"]["calls"][-1][0]


def test_the_model_matrices_are_the_built_models():
    for family in FAMILIES:
        model = build_model(family, "tiny", seed=0, device="meta")
        built = {(p.shape[0], p[0].numel()) for p in model.parameters() if p.dim() >= 2}
        assert set(model_matrices(model_info(family, "tiny"))) == built, family


def test_largest_rank_is_torchs_rule():
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    for n, m in [(256, 256), (1024, 256), (512, 4), (48, 512), (3, 3), (1, 7)]:
        for r in range(1, min(n, m) + 3):
            rank = min(n, m, r)
            torch_says = _should_compress(n, m, rank, MIN_COMPRESSION_RATE)[0]
            assert compressed(n, m, r) == torch_says
            assert (r <= largest_rank(n, m)) == torch_says


def test_a_rank_that_compresses_nothing_is_refused():
    info = model_info("transformer", "tiny")
    check_powersgd_rank(102, info)  # the 1024×256 embedding and head still are
    with pytest.raises(SpecError, match=r"ddp.powersgd_rank=103 compresses no matrix.*at most 102"):
        check_powersgd_rank(103, info)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "strategy=fsdp", "--set", "ddp.compress=bf16"],
            "ddp.compress=bf16 applies to strategy=ddp, not strategy=fsdp",
        ),
        (
            ["--set", "strategy=ddp", "--set", "ddp.compress=powersgd",
             "--set", "ddp.powersgd_rank=300"],
            "ddp.powersgd_rank=300 compresses no matrix of transformer/tiny",
        ),
    ],
)  # fmt: skip
def test_a_run_that_cannot_use_its_compression_is_refused_in_one_line(
    tmp_path: Path, args: list[str], message: str
):
    db = tmp_path / "r.duckdb"
    base = ["run", "--workload", "data-parallel", "--device", "cpu", "--db", str(db)]
    result = CliRunner().invoke(main, [*base, "--set", "model.size=tiny", *args])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and message in line, line
    assert not db.exists()
