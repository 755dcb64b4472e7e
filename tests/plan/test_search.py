"""Layout enumeration, validity, ranking and the Pareto set."""

from __future__ import annotations

import math

import pytest

from greenbench.errors import SpecError
from greenbench.plan.cost import Batch, Prediction
from greenbench.plan.device import device_model
from greenbench.plan.memory import Memory
from greenbench.plan.search import factorisations, pareto_set, plan
from greenbench.plan.shapes import model_shape
from greenbench.vocabulary import Layout

H100 = device_model("h100", "bf16")
SEVEN_B = model_shape("transformer", "7b")
BATCH = Batch(seq_len=4096, global_batch=512, micro_batch=1)


def test_factorisations_are_every_ordered_split() -> None:
    found = list(factorisations(64, 5))
    assert len(found) == len(set(found)) == math.comb(6 + 4, 4)  # 2^6 into 5 ordered parts
    assert all(math.prod(f) == 64 for f in found)
    assert sorted(factorisations(6, 2)) == [(1, 6), (2, 3), (3, 2), (6, 1)]


def test_seven_b_on_64_h100s() -> None:
    result = plan(SEVEN_B, 64, BATCH, H100)
    texts = {p.layout.text for p in result.ranked}
    assert len(result.ranked) + result.rejected == 210
    assert result.rejected == 2  # tp=64 (32 heads) and pp=64 (32 layers)
    assert "dpr1-dps1-tp64-pp1-cp1" not in texts and "dpr1-dps1-tp1-pp64-cp1" not in texts
    assert all(p.layout.world == 64 and 32 % p.layout.tp == 0 for p in result.ranked)
    fits = [p.fits for p in result.ranked]
    assert fits == sorted(fits, reverse=True)  # fitting layouts first
    energy = [p.joules_per_token for p in result.ranked if p.fits]
    assert energy == sorted(energy)


def test_rank_by_time_and_memory() -> None:
    by_time = plan(SEVEN_B, 16, BATCH, H100, rank_by="time").ranked
    steps = [p.step_s for p in by_time if p.fits]
    assert steps == sorted(steps)
    by_memory = plan(SEVEN_B, 16, BATCH, H100, rank_by="memory").ranked
    mem = [p.memory.total_b for p in by_memory if p.fits]
    assert mem == sorted(mem)


def test_the_pareto_set_of_a_real_plan_is_exactly_the_undominated() -> None:
    result = plan(SEVEN_B, 64, BATCH, H100)
    fitting = [p for p in result.ranked if p.fits]

    def cost(p: Prediction) -> tuple[float, float, float]:
        return (p.step_s, p.joules_per_token, p.memory.total_b)

    for p in fitting:
        dominated = any(
            all(a <= b for a, b in zip(cost(q), cost(p), strict=True)) and cost(q) != cost(p)
            for q in fitting
        )
        assert (p.layout in result.pareto) is not dominated
    assert all(p.fits for p in result.ranked if p.layout in result.pareto)


def _fake(dpr: int, step_s: float, jpt: float, mem: float, fits: bool = True) -> Prediction:
    return Prediction(
        layout=Layout(dp_replicate=dpr), microbatches=1, step_s=step_s, compute_s=step_s,
        bubble_s=0.0, comm_s=0.0, tokens_per_s=1 / step_s, joules_per_token=jpt,
        memory=Memory(mem, 0.0, 0.0, 0.0), fits=fits,
    )  # fmt: skip


def test_pareto_by_hand() -> None:
    a = _fake(1, 1.0, 3.0, 3.0)  # fastest
    b = _fake(2, 2.0, 1.0, 3.0)  # leanest in energy
    c = _fake(3, 3.0, 3.0, 1.0)  # leanest in memory
    d = _fake(4, 2.0, 3.0, 3.0)  # dominated by a
    e = _fake(5, 1.0, 3.0, 3.0)  # ties a: neither dominates the other
    f = _fake(6, 0.5, 0.5, 0.5, fits=False)  # would dominate all, but does not fit
    assert pareto_set([a, b, c, d, e, f]) == {a.layout, b.layout, c.layout, e.layout}


@pytest.mark.parametrize("devices", [0, -4])
def test_impossible_device_counts(devices: int) -> None:
    with pytest.raises(SpecError, match="--devices must be"):
        plan(SEVEN_B, devices, BATCH, H100)


def test_no_valid_layout_is_one_clear_error() -> None:
    # 5 devices, tiny (8 heads, 4 layers): no degree of 5 divides a batch of 4, the heads or
    # the sequence, and 5 stages are more than the layers
    tiny = model_shape("transformer", "tiny")
    with pytest.raises(SpecError, match="no layout of 5 device"):
        plan(tiny, 5, Batch(seq_len=4096, global_batch=4, micro_batch=1), H100)


def test_unknown_ranking() -> None:
    with pytest.raises(SpecError, match="--rank-by"):
        plan(SEVEN_B, 8, BATCH, H100, rank_by="cost")
