"""Karmarkar–Karp partitioning: it is a partition, and a good one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenbench.data.partition import karmarkar_karp, refine_partition


def _sums(costs: list[float], parts: list[list[int]]) -> list[float]:
    return [sum(costs[i] for i in p) for p in parts]


def _assert_partition(parts: list[list[int]], n: int, k: int) -> None:
    assert len(parts) == k
    flat = [i for p in parts for i in p]
    assert sorted(flat) == list(range(n))


def test_classic_example_and_what_refinement_adds() -> None:
    costs = [8, 7, 6, 5, 4]
    # Plain largest differencing ends at 16/14 on this instance; one swap makes it 15/15.
    plain = karmarkar_karp(costs, 2, refine=False)
    assert _sums(costs, plain) == [16, 14]
    refined = karmarkar_karp(costs, 2)
    _assert_partition(refined, 5, 2)
    assert _sums(costs, refined) == [15, 15]


def test_skewed_costs_beat_a_naive_split() -> None:
    rng = np.random.default_rng(0)
    costs = (rng.lognormal(0.0, 1.2, size=64) ** 2).tolist()  # heavy-tailed
    k = 4
    parts = karmarkar_karp(costs, k)
    _assert_partition(parts, 64, k)
    sums = _sums(costs, parts)
    assert sums == sorted(sums, reverse=True)
    naive = [list(range(r, 64, k)) for r in range(k)]  # round-robin, as a sampler deals
    naive_sums = _sums(costs, naive)
    kk_ratio = max(sums) / min(sums)
    assert kk_ratio < 1.02
    assert kk_ratio < max(naive_sums) / min(naive_sums)


def test_equal_size_keeps_counts() -> None:
    rng = np.random.default_rng(1)
    costs = rng.lognormal(0.0, 1.0, size=24).tolist()
    parts = karmarkar_karp(costs, 4, equal_size=True)
    _assert_partition(parts, 24, 4)
    assert [len(p) for p in parts] == [6, 6, 6, 6]
    with pytest.raises(ValueError, match="divisible"):
        karmarkar_karp(costs[:23], 4, equal_size=True)


def test_identical_items_split_evenly() -> None:
    parts = karmarkar_karp([3.0] * 12, 5)
    assert sorted(len(p) for p in parts) == [2, 2, 2, 3, 3]


def test_edge_cases() -> None:
    assert karmarkar_karp([], 3) == [[], [], []]
    assert karmarkar_karp([1.0, 2.0], 1) == [[0, 1]]
    parts = karmarkar_karp([5.0, 1.0], 3)
    _assert_partition(parts, 2, 3)
    assert sorted(len(p) for p in parts) == [0, 1, 1]
    with pytest.raises(ValueError):
        karmarkar_karp([1.0, -1.0], 2)
    with pytest.raises(ValueError):
        karmarkar_karp([1.0], 0)


def test_refinement_never_worsens_a_partition() -> None:
    costs = [9.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    bad = [[0, 1, 2], [3, 4, 5]]  # 11 vs 3
    better = refine_partition(costs, bad)
    assert max(_sums(costs, better)) == 9.0
    swaps_only = refine_partition(costs, bad, allow_moves=False)
    assert sorted(len(p) for p in swaps_only) == [3, 3]


@settings(max_examples=150, deadline=None)
@given(
    costs=st.lists(st.floats(0.01, 1000.0), min_size=1, max_size=40),
    k=st.integers(1, 6),
)
def test_partition_property(costs: list[float], k: int) -> None:
    parts = karmarkar_karp(costs, k)
    _assert_partition(parts, len(costs), k)
    if len(costs) >= k:
        assert all(parts), "no set stays empty when there are enough items"
    # After refinement no single move can help, so the spread is at most the largest item.
    sums = _sums(costs, parts)
    assert max(sums) - min(sums) <= max(costs) * (1 + 1e-9)
