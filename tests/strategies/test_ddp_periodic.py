"""DDP's infrequent synchronisation (``ddp.sync``): torch's local SGD and our DiLoCo, on real
gloo ranks.

Local SGD that averages after every step is DDP for plain SGD (the update is linear in the
gradient: the mean of the ranks' steps is the step on the mean gradient); past its warm-up it
all-reduces no gradient and averages the parameters on multiples of ``ddp.period`` steps only.
DiLoCo's outer step is checked against Nesterov momentum worked by hand. The rank loop keeps
windows to whole periods, and a run to a target that would evaluate between synchronisations
is refused.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import ClassVar

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
from greenbench.rank.training import whole_periods
from greenbench.rank.worker import steps_per_window
from greenbench.settings.run import TrainSettings
from greenbench.sources.builtin import next_token_loss
from greenbench.strategies import STRATEGIES
from greenbench.strategies.ddp_periodic import Averaging, DiLoCo, averager_warmup
from greenbench.strategies.ddp_settings import DDPSettings

WORLD = 2


def context(rank: int, world: int = WORLD) -> DistContext:
    return DistContext(rank, rank, world, torch.device("cpu"), torch.float32)


def _init(rank: int, port: int) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)


class CountedLink(EmulatedLink):
    """A link whose delays are noted instead of slept (no timing in tests)."""

    delays: ClassVar[list[float]] = []

    def delay(self, seconds: float) -> float:
        CountedLink.delays.append(seconds)
        return seconds


def train(
    rank: int, settings: DDPSettings, steps: int, optimizer: str, link: EmulatedLink | None = None
) -> tuple[dict[str, torch.Tensor], list[list[tuple[str, str, int]]], list[bool]]:
    """``steps`` steps of the tiny Transformer under DDP with ``settings``: the parameters, each
    step's recorded calls (dim, op, bytes), and after each step whether the ranks' parameters
    agree."""
    import torch.distributed as dist

    torch.manual_seed(0)
    builder = ModelBuilder(FAMILIES["transformer"], "tiny", seed=0, kernel="auto")
    strat = STRATEGIES["ddp"].load()(context(rank))
    strat.settings = settings
    if link is not None:
        strat.link = link
    model = strat.parallelize(builder)
    schedule = strat.schedule(next_token_loss)
    if optimizer == "sgd":
        inner: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with warnings.catch_warnings():  # torch's averager advises against a period of 1
        warnings.simplefilter("ignore")
        opt = strat.wrap_optimizer(inner)
    plan = DataPlan(source=MarkovSource(vocab_size=builder.info.vocab_size, seed=1), **TINY_DATA)
    calls, agree = [], []
    for step in range(steps):
        schedule.train_step(model, opt, strat.assignment.batch(plan, step))
        calls.append([(c.dim, c.op, c.nbytes) for c in strat.comm.take()])
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        both = [torch.empty_like(flat) for _ in range(WORLD)]
        dist.all_gather(both, flat)
        agree.append(torch.equal(both[0], both[1]))
    params = {n: p.detach().clone() for n, p in model.module.named_parameters()}
    return params, calls, agree


def _equivalence(rank: int, port: int, out: str) -> None:
    _init(rank, port)
    ddp, _, _ = train(rank, DDPSettings(), 3, "sgd")
    local, _, agree = train(rank, DDPSettings(sync="local-sgd", period=1), 3, "sgd")
    if rank == 0:
        torch.save({"ddp": ddp, "local": local, "agree": agree}, out)


@pytest.mark.slow
def test_local_sgd_averaging_every_step_is_ddp_for_plain_sgd(tmp_path: Path) -> None:
    out = tmp_path / "params.pt"
    spawn(_equivalence, (free_port(), str(out)), WORLD)
    got = torch.load(out)
    assert got["agree"] == [True, True, True]
    assert got["ddp"].keys() == got["local"].keys()
    for name, ref in got["ddp"].items():
        torch.testing.assert_close(got["local"][name], ref, rtol=0, atol=1e-6, msg=name)


def _recording(rank: int, port: int, out: str) -> None:
    _init(rank, port)
    link = CountedLink(latency_s=0.001)
    local = train(rank, DDPSettings(sync="local-sgd", period=3, local_warmup=2), 8, "adamw", link)
    diloco = train(rank, DDPSettings(sync="diloco", period=3), 6, "adamw")
    if rank == 0:
        params = sum(p.numel() * p.element_size() for p in local[0].values())
        torch.save(
            {
                "local": local[1:],
                "diloco": diloco[1:],
                "params": params,
                "delays": CountedLink.delays,
                "link": link.all_reduce_s(params, WORLD),
            },
            out,
        )


@pytest.mark.slow
def test_after_warmup_only_the_parameters_are_averaged_every_period(tmp_path: Path) -> None:
    out = tmp_path / "calls.pt"
    spawn(_recording, (free_port(), str(out)), WORLD)
    got = torch.load(out)
    params = got["params"]
    calls, agree = got["local"]
    # warm-up (2 steps): DDP's gradient all-reduce of every parameter, and nothing else
    for step in (0, 1):
        assert calls[step] == [("dp_replicate", "all_reduce", params)]
    # then no gradient all-reduce (nor buffer broadcast): one "average" of the parameters
    # at step counts that are multiples of the period (3, 6), none between
    averaged = [("dp_replicate", "average", params)]
    assert calls[2:] == [averaged, [], [], averaged, [], []]
    assert agree == [True, True, True, False, False, True, False, False]
    # the averages' bytes per step are 1/H of the parameters', against DDP's whole gradient
    assert sum(b for step in calls[2:8] for _, _, b in step) == 2 * params
    # the emulated link lengthened each averaging by its ring all-reduce time, nothing else
    assert got["delays"] == [got["link"]] * 2
    calls, agree = got["diloco"]
    assert calls == [[], [], averaged, [], [], averaged]
    assert agree == [False, False, True, False, False, True]


def _diloco_by_hand(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    _init(rank, port)
    model = torch.nn.Linear(1, 1)  # two parameters: weight and bias
    with torch.no_grad():
        model.weight.fill_(1.0)
        model.bias.fill_(-2.0)
    comm = CommRecorder()
    opt = DiLoCo(
        torch.optim.SGD(model.parameters(), lr=1.0),
        period=2,
        outer_lr=0.7,
        outer_momentum=0.9,
        process_group=None,
        averaging=Averaging(comm, EmulatedLink(), WORLD, torch.device("cpu")),
    )
    seen = []
    for step in range(4):
        opt.zero_grad()
        # known gradients, different per rank and step: the inner step subtracts them
        model.weight.grad = torch.tensor([[0.1 * (rank + 1) * (step + 1)]])
        model.bias.grad = torch.tensor([-0.2 * (rank + 1) + 0.05 * step])
        opt.step()
        seen.append((model.weight.item(), model.bias.item()))
    calls = [(c.op, c.nbytes) for c in comm.take()]
    dist.barrier()
    if rank == 0:
        torch.save({"seen": seen, "calls": calls}, out)


@pytest.mark.slow
def test_diloco_outer_step_is_nesterov_on_the_averaged_change(tmp_path: Path) -> None:
    out = tmp_path / "diloco.pt"
    spawn(_diloco_by_hand, (free_port(), str(out)), WORLD)
    got = torch.load(out)
    lr, mu = 0.7, 0.9

    def grads(rank: int, step: int) -> tuple[float, float]:
        return 0.1 * (rank + 1) * (step + 1), -0.2 * (rank + 1) + 0.05 * step

    def change(steps: range) -> list[float]:
        """The mean over ranks of the inner steps' summed gradients: θ_outer − mean θ_local."""
        return [sum(grads(r, s)[i] for r in range(WORLD) for s in steps) / WORLD for i in (0, 1)]

    theta = [1.0, -2.0]
    # first period: momentum buffer b1 = Δ1; Nesterov's step is Δ1 + μ b1
    d1 = change(range(0, 2))
    b1 = d1
    theta1 = [t - lr * (d + mu * b) for t, d, b in zip(theta, d1, b1, strict=True)]
    # second period: b2 = μ b1 + Δ2; step Δ2 + μ b2
    d2 = change(range(2, 4))
    b2 = [mu * b + d for b, d in zip(b1, d2, strict=True)]
    theta2 = [t - lr * (d + mu * b) for t, d, b in zip(theta1, d2, b2, strict=True)]
    assert got["seen"][1] == pytest.approx(tuple(theta1), abs=1e-6)
    assert got["seen"][3] == pytest.approx(tuple(theta2), abs=1e-6)
    # between synchronisations, rank 0's own inner step: θ1 − its gradient
    g = grads(0, 2)
    assert got["seen"][2] == pytest.approx((theta1[0] - g[0], theta1[1] - g[1]), abs=1e-6)
    assert got["calls"] == [("average", 8), ("average", 8)]  # two float32 parameters


def test_local_sgd_averages_on_multiples_of_the_period_whatever_the_warmup() -> None:
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

    for warmup in range(7):
        for period in (1, 2, 3, 4):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                averager = PeriodicModelAverager(
                    period, averager_warmup(warmup, period), process_group=object()
                )
            counts = []
            for step in range(20):
                s, w = averager.step, averager.warmup_steps
                if s >= w and (s - w) % period == 0:  # torch's rule
                    counts.append(step + 1)
                averager.step += 1
            expected = [c for c in range(warmup + 1, 21) if c % period == 0]
            assert counts == expected, (warmup, period)


def test_windows_hold_whole_periods() -> None:
    assert [whole_periods(n, 4) for n in (0, 1, 4, 5, 8)] == [0, 4, 4, 8, 8]
    assert whole_periods(7, 1) == 7
    train = TrainSettings(steps=5, max_steps=100, min_window_s=0.0)
    single = context(0, world=1)
    assert steps_per_window(train, [], single) == 5
    assert steps_per_window(train, [], single, period=4) == 8
    assert steps_per_window(train, [], single, period=5) == 5


def _run(tmp_path: Path, *settings: str) -> tuple[int, str]:
    db = tmp_path / "r.duckdb"
    args = ["run", "--workload", "data-parallel", "--device", "cpu", "--db", str(db)]
    for s in ("strategy=ddp", *settings):
        args += ["--set", s]
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (("ddp.sync=local-sgd", "ddp.period=0"), "ddp.period must be at least 1 step (got 0)"),
        (
            ("ddp.sync=local-sgd", "ddp.period=4", "train.until=target", "eval.every=6"),
            "eval.every=6 must be a multiple of ddp.period=4 with ddp.sync=local-sgd",
        ),
        (
            ("ddp.sync=diloco", "ddp.period=3", "train.until=target", "eval.every=10"),
            "eval.every=10 must be a multiple of ddp.period=3 with ddp.sync=diloco",
        ),
    ],
)
def test_bad_periodic_settings_are_one_line_and_write_nothing(
    tmp_path: Path, settings: tuple[str, ...], named: str
) -> None:
    code, output = _run(tmp_path, *settings)
    assert code == 2, output
    (line,) = output.strip().splitlines()
    assert line.startswith("error: ") and named in line
    assert list(tmp_path.iterdir()) == []
