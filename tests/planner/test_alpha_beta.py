"""The α–β formulas and the bubble, against numbers worked by hand."""

from __future__ import annotations

import pytest

from greenbench.planner import alpha_beta

LINK = alpha_beta.Link(alpha_s=1e-5, beta_s_per_byte=1e-9)  # 10 µs, 1 GB/s


def test_point_to_point_is_alpha_plus_n_beta() -> None:
    assert alpha_beta.point_to_point(1e6, LINK) == pytest.approx(1e-5 + 1e-3)


def test_all_gather_and_reduce_scatter_over_four_ranks() -> None:
    # (p−1)·α + (p−1)/p·n·β = 3·10 µs + 3/4 · 8e6 B · 1 ns/B = 30 µs + 6 ms
    assert alpha_beta.all_gather(8e6, 4, LINK) == pytest.approx(3e-5 + 6e-3)
    assert alpha_beta.reduce_scatter(8e6, 4, LINK) == pytest.approx(3e-5 + 6e-3)


def test_all_reduce_is_twice_an_all_gather() -> None:
    assert alpha_beta.all_reduce(8e6, 4, LINK) == pytest.approx(2 * (3e-5 + 6e-3))
    assert alpha_beta.all_reduce(8e6, 8, LINK) == pytest.approx(2 * (7e-5 + 7 / 8 * 8e-3))


def test_a_collective_of_one_rank_costs_nothing() -> None:
    assert alpha_beta.all_reduce(8e6, 1, LINK) == 0.0
    assert alpha_beta.all_gather(8e6, 1, LINK) == 0.0


def test_unknown_op_is_refused() -> None:
    with pytest.raises(ValueError, match="broadcast"):
        alpha_beta.seconds("broadcast", 1.0, 2, LINK)


def test_link_of_bandwidth() -> None:
    link = alpha_beta.Link.of_bandwidth(5e-6, 450e9)
    assert link.beta_s_per_byte == pytest.approx(1 / 450e9)


@pytest.mark.parametrize(
    ("stages", "microbatches", "fraction"),
    [(1, 8, 0.0), (4, 1, 3 / 4), (4, 8, 3 / 11), (8, 32, 7 / 39)],
)
def test_bubble_fraction(stages: int, microbatches: int, fraction: float) -> None:
    assert alpha_beta.bubble_fraction(stages, microbatches) == pytest.approx(fraction)


def test_bubble_needs_a_stage_and_a_microbatch() -> None:
    with pytest.raises(ValueError):
        alpha_beta.bubble_fraction(0, 4)
