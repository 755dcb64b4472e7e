"""A user workload in the workload contract: its batches as step batches, its mean loss as the
summed loss the strategies normalise, its FLOPs given or counted once."""

from __future__ import annotations

import pytest
import torch

from greenbench.distributed.device import DistContext
from greenbench.sources.user import UserBatches, UserFlops, UserModel, user_workload
from greenbench.strategies.single import Single
from greenbench.user import Batch, Workload


def build(ctx):
    return torch.nn.Linear(ctx.settings["width"], 1, bias=False)


def batch(ctx, step):
    g = torch.Generator().manual_seed(100 * step + ctx.rank)
    return Batch(data=(torch.randn(3, 4, generator=g), torch.randn(3, 1, generator=g)), tokens=3)


def loss(model, data):
    x, y = data
    return ((model(x) - y) ** 2).mean()


WORKLOAD = Workload(name="lin", build_model=build, batch=batch, loss=loss, settings={"width": 4})


def parts(world: int = 1) -> tuple[UserModel, UserBatches]:
    workload = user_workload(WORKLOAD, {"width": 4}, seed=7, device=torch.device("cpu"))
    return workload.model, workload.batches  # type: ignore[return-value]


def test_a_rank_s_batch_is_one_microbatch_of_the_minibatch():
    _, plan = parts()
    step = plan.part(2, 1, 2)
    (mb,) = step.microbatches
    assert step.n_tokens == 3 and step.global_tokens == 6  # this rank's tokens × 2 ranks
    assert torch.equal(mb.data[0], batch(type("C", (), {"rank": 1})(), 2).data[0])


def test_the_strategies_train_on_the_workload_s_mean_loss():
    workload = user_workload(WORKLOAD, {"width": 4}, seed=7, device=torch.device("cpu"))
    single = Single(DistContext(0, 0, 1, torch.device("cpu"), torch.float32))
    model = single.parallelize(workload.model)
    assert torch.equal(model.weight, workload.model.build("cpu").weight)  # seeded like any model
    step = single.assignment.batch(workload.batches, 0)
    expected = loss(model, step.microbatches[0].data).item()
    before = model.weight.detach().clone()
    schedule = single.schedule(workload.loss)
    summed, _ = schedule.train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), step)
    assert summed == pytest.approx(expected * 3)  # mean × tokens: the strategies' sum
    # one SGD step on the mean loss, as the user's own loop would take it
    reference = before.clone().requires_grad_(True)
    x, y = step.microbatches[0].data
    ((x @ reference.T - y) ** 2).mean().backward()
    assert torch.allclose(model.weight, before - 0.1 * reference.grad)


def test_flops_are_given_or_counted_once():
    _, plan = parts()
    step = plan.part(0, 0, 1)
    assert UserFlops(100.0).of(step) == 300.0
    counted = UserFlops(None)
    model = torch.nn.Linear(4, 1, bias=False)
    with counted.counting(step):
        loss(model, step.microbatches[0].data).backward()
    # forward 2·3·4·1 = 24, backward (weight gradient) 24 more
    assert counted.per_token == pytest.approx(48 / 3)
    assert counted.of(step) == pytest.approx(48)


def test_a_workload_returning_the_wrong_things_is_named():
    bad = Workload(name="bad", build_model=lambda ctx: 1, batch=lambda c, s: 2, loss=loss)
    workload = user_workload(bad, {}, seed=0, device=torch.device("cpu"))
    with pytest.raises(TypeError, match="build_model\\(\\) returned int"):
        workload.model.build("cpu")
    with pytest.raises(TypeError, match="batch\\(\\) returned int"):
        workload.batches.part(0, 0, 1)
