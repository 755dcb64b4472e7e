"""Layout enumeration, validity, ranking and the Pareto set; the bounded search against the
exhaustive one it replaced, and device counts up to the stated maximum."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence

import pytest

from greenbench.errors import SpecError
from greenbench.models import ModelPreset, layout_fits, model_preset
from greenbench.planner.cost import Batch, Prediction, predict
from greenbench.planner.device import DeviceModel, device_model
from greenbench.planner.memory import Memory
from greenbench.planner.search import (
    MAX_DEVICES,
    MAX_LAYOUTS,
    RANKINGS,
    candidate_layouts,
    count_factorisations,
    divisors,
    pareto_set,
    plan,
)
from greenbench.vocabulary import DEGREES, Layout

H100 = device_model("h100", "bf16")
SEVEN_B = model_preset("transformer", "7b")
BATCH = Batch(seq_len=4096, global_batch=512, micro_batch=1)


def factorisations(n: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every ordered tuple of ``parts`` positive integers whose product is ``n``, in
    lexicographic order: the enumeration the planner used to price one by one."""
    if parts == 1:
        yield (n,)
        return
    for d in range(1, n + 1):
        if n % d == 0:
            for rest in factorisations(n // d, parts - 1):
                yield (d, *rest)


def exhaustive(
    shape: ModelPreset, devices: int, batch: Batch, device: DeviceModel, rank_by: str = "energy"
) -> tuple[list[Prediction], frozenset[Layout], int]:
    """The search as it was: every ordered factorisation priced, ranked (stable sort over the
    enumeration order), the Pareto set by comparing every pair."""
    predictions, rejected = [], 0
    for degrees in factorisations(devices, len(DEGREES)):
        layout = Layout(**dict(zip(DEGREES, degrees, strict=True)))
        misfit = layout_fits(shape, layout.tp, layout.pp, layout.cp, batch.seq_len)
        found = None if misfit else predict(shape, layout, batch, device)
        if found is None:
            rejected += 1
            continue
        predictions.append(found)
    key = RANKINGS[rank_by]
    ranked = sorted(predictions, key=lambda p: (not p.fits, key(p)))
    return ranked, pairwise_pareto(predictions), rejected


def pairwise_pareto(predictions: Sequence[Prediction]) -> frozenset[Layout]:
    """The Pareto set by its definition: every fitting cost compared with every other."""
    fitting = [p for p in predictions if p.fits]
    costs = [(p.step_s, p.joules_per_token, p.memory.total_b) for p in fitting]
    return frozenset(
        p.layout
        for p, c in zip(fitting, costs, strict=True)
        if not any(all(o <= x for o, x in zip(other, c, strict=True)) and other != c
                   for other in costs)
    )  # fmt: skip


def test_the_reference_enumeration_is_every_ordered_split() -> None:
    found = list(factorisations(64, 5))
    assert len(found) == len(set(found)) == math.comb(6 + 4, 4)  # 2^6 into 5 ordered parts
    assert all(math.prod(f) == 64 for f in found)
    assert sorted(factorisations(6, 2)) == [(1, 6), (2, 3), (3, 2), (6, 1)]


def test_ordered_factorisations_are_counted_without_listing_them() -> None:
    for n in range(1, 201):
        for parts in range(1, 6):
            assert count_factorisations(n, parts) == sum(1 for _ in factorisations(n, parts))
    assert count_factorisations(2**20, 5) == math.comb(20 + 4, 4)
    assert count_factorisations(1000000007, 5) == 5  # a prime: one degree takes it all


def test_divisors_by_trial_division() -> None:
    for n in range(1, 201):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    assert len(divisors(735134400)) == 1344  # the most divisors of any count up to 2^30
    assert divisors(1000000007) == [1, 1000000007]


#: (family, size, seq_len, global batch, micro-batch): every kind of constraint the search
#: bounds — tp by heads (7b), by kv heads (1b: 4), by inner channels (mamba), cp forbidden
#: (mamba2), batches with odd factors and a micro-batch above 1
SAME_AS_EXHAUSTIVE = [
    ("transformer", "7b", 4096, 512, 1),
    ("transformer", "1b", 96, 60, 3),
    ("mamba", "tiny", 1536, 48, 2),
    ("mamba2", "125m", 2048, 96, 1),
]


@pytest.mark.parametrize(("family", "size", "seq_len", "global_batch", "micro_batch"),
                         SAME_AS_EXHAUSTIVE)  # fmt: skip
def test_the_bounded_search_is_the_exhaustive_one(
    family: str, size: str, seq_len: int, global_batch: int, micro_batch: int
) -> None:
    shape = model_preset(family, size)
    batch = Batch(seq_len=seq_len, global_batch=global_batch, micro_batch=micro_batch)
    compared = 0
    for n in range(1, 201):
        ranked, pareto, rejected = exhaustive(shape, n, batch, H100)
        if not any(p.fits for p in ranked):  # nothing to plan: refused, saying why
            with pytest.raises(SpecError, match=f"no layout of {n} device"):
                plan(shape, n, batch, H100)
            continue
        result = plan(shape, n, batch, H100)
        assert list(result.ranked) == ranked, n
        assert result.pareto == pareto, n
        assert result.rejected == rejected, n
        compared += 1
    assert compared > 20


def test_each_ranking_keeps_the_exhaustive_order() -> None:
    for rank_by in RANKINGS:
        ranked, _, _ = exhaustive(SEVEN_B, 96, BATCH, H100, rank_by)
        assert list(plan(SEVEN_B, 96, BATCH, H100, rank_by=rank_by).ranked) == ranked


@pytest.mark.timeout(120)  # the exhaustive search took seconds on 2^20, never ended on more
@pytest.mark.parametrize(
    ("devices", "batch"),
    [
        (2**20, BATCH),
        # 2^6·3^3·5^2·7·11·13·17: a global batch taking the odd factors, 49,888 layouts
        (735134400, Batch(seq_len=4096, global_batch=2 * 3**3 * 5**2 * 7 * 11 * 13 * 17,
                          micro_batch=1)),
        (MAX_DEVICES, BATCH),
    ],
)  # fmt: skip
def test_large_device_counts_are_planned(devices: int, batch: Batch) -> None:
    result = plan(SEVEN_B, devices, batch, H100)
    assert result.ranked and all(p.layout.world == devices for p in result.ranked)
    assert all(
        layout_fits(SEVEN_B, p.layout.tp, p.layout.pp, p.layout.cp, batch.seq_len) is None
        for p in result.ranked
    )
    assert all(batch.global_batch % (p.layout.dp * batch.micro_batch) == 0 for p in result.ranked)
    assert len(result.ranked) + result.rejected == count_factorisations(devices, 5)
    assert len({p.layout for p in result.ranked}) == len(result.ranked)
    assert result.pareto and all(p.fits for p in result.ranked if p.layout in result.pareto)


@pytest.mark.timeout(120)
def test_a_large_prime_count_has_no_layout() -> None:
    with pytest.raises(SpecError, match="no layout of 1000000007 device"):
        plan(SEVEN_B, 1000000007, BATCH, H100)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("devices", [MAX_DEVICES + 1, 99999999999999999999999])
def test_counts_above_the_maximum_are_refused(devices: int) -> None:
    assert MAX_DEVICES == 2**30
    with pytest.raises(SpecError, match="--devices must be at most 1,073,741,824"):
        plan(SEVEN_B, devices, BATCH, H100)


@pytest.mark.parametrize(
    ("batch", "says"),
    [
        (Batch(seq_len=2**30 + 1, global_batch=512, micro_batch=1), "--seq-len must be at most"),
        (Batch(seq_len=4096, global_batch=10**23, micro_batch=1), "--global-batch must be at most"),
        (Batch(seq_len=4096, global_batch=512, micro_batch=1024), "--micro-batch 1024 is more"),
        (Batch(seq_len=4096, global_batch=512, micro_batch=3), "512 is not a multiple of"),
    ],
)
def test_batches_beyond_the_model_are_refused(batch: Batch, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        plan(SEVEN_B, 64, batch, H100)


@pytest.mark.parametrize(
    ("devices", "seq_len", "hint"),
    [
        # a million tokens per sequence: the leanest layout of 64 H100s holds too many activations
        (64, 2**20, "try a shorter --seq-len, a smaller --micro-batch or more --devices"),
        # 7b's parameters, gradients and AdamW state alone are more than one H100 holds
        (1, 4096, "its model state alone does not fit: plan for more --devices"),
    ],
)
def test_nothing_fitting_the_device_is_refused_with_the_least_it_needs(
    devices: int, seq_len: int, hint: str
) -> None:
    batch = Batch(seq_len=seq_len, global_batch=512, micro_batch=1)
    with pytest.raises(SpecError) as refused:
        plan(SEVEN_B, devices, batch, H100)
    line = str(refused.value)
    assert line.startswith(f"no layout of {devices} device(s) fits transformer/7b at seq ")
    assert "GiB per device, 67.1 GiB usable; " in line and line.endswith(hint)


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


def test_the_pareto_set_is_the_pairwise_one_with_ties_and_misfits() -> None:
    rng = random.Random(11)
    for _ in range(400):
        predictions = [
            _fake(i + 1, *(float(rng.randint(1, 4)) for _ in range(3)), fits=rng.random() < 0.9)
            for i in range(rng.randint(0, 40))
        ]
        assert pareto_set(predictions) == pairwise_pareto(predictions)


def test_more_layouts_than_a_plan_prices_are_refused() -> None:
    assert len(candidate_layouts(SEVEN_B, 64, BATCH, most=208)) == 208
    with pytest.raises(
        SpecError,
        match="64 devices leave 208 layouts of transformer/7b at "
        "global batch 512 and seq 4,096, more than the 207 a plan prices",
    ):
        candidate_layouts(SEVEN_B, 64, BATCH, most=207)
    # a count, batch and sequence all rich in common factors: 587,331 layouts
    rich = Batch(seq_len=720720, global_batch=720720, micro_batch=1)
    with pytest.raises(SpecError, match=f"more than the {MAX_LAYOUTS:,} a plan prices"):
        plan(model_preset("mamba", "7b"), 738017280, rich, H100)


@pytest.mark.parametrize("devices", [0, -4])
def test_impossible_device_counts(devices: int) -> None:
    with pytest.raises(SpecError, match="--devices must be"):
        plan(SEVEN_B, devices, BATCH, H100)


def test_no_valid_layout_is_one_clear_error() -> None:
    # 5 devices, tiny (8 heads, 4 layers): no degree of 5 divides a batch of 4, the heads or
    # the sequence, and 5 stages are more than the layers
    tiny = model_preset("transformer", "tiny")
    with pytest.raises(SpecError, match="no layout of 5 device"):
        plan(tiny, 5, Batch(seq_len=4096, global_batch=4, micro_batch=1), H100)


def test_unknown_ranking() -> None:
    with pytest.raises(SpecError, match="--rank-by"):
        plan(SEVEN_B, 8, BATCH, H100, rank_by="cost")
