"""A repeat's figures to a target loss from its ranks' `TargetOutcome`s (`greenbench.aggregate`):
the repeat's own tokens, seconds and energy when it reached the target, none when it did not;
the validation curve over the ranks; a run's medians to target, a miss counted as above every
repeat that reached."""

from __future__ import annotations

import math

import pytest

from greenbench.aggregate import aggregate_repeat
from greenbench.aggregate.target import target_medians
from greenbench.energy.base import EnergyWindow
from greenbench.results import RankResult, TargetOutcome, ValPoint
from greenbench.vocabulary import TARGET_FIGURES


def outcome(
    reached: bool,
    *,
    joules: tuple[float | None, ...],
    eval_j: float | None,
    seconds: tuple[float, ...],
    eval_s: float,
    best: float,
) -> TargetOutcome:
    """One rank's run to the target 3.0: evaluations at steps 10 and 20 (losses 3.4, 2.9 when
    it reached, 3.4, 3.1 when it did not), the rank's own seconds and joules."""
    losses = (3.4, 2.9) if reached else (3.4, 3.1)
    curve = tuple(
        ValPoint(step=10 * (k + 1), tokens=640 * (k + 1), seconds=seconds[k], joules=joules[k],
                 val_loss=losses[k])
        for k in range(2)
    )  # fmt: skip
    return TargetOutcome(
        target_loss=3.0, reached=reached, steps=20, tokens=1280, best_val_loss=best,
        eval_s=eval_s, eval_energy_j=eval_j, stopped_by="reached" if reached else "max_steps",
        curve=curve,
    )  # fmt: skip


def ranks(reached: bool, *, rank1_joules: float | None = 30.0) -> list[RankResult]:
    """Two ranks of one repeat, each reading its own meter: rank 0 trained 2.0 s on 100 J,
    rank 1 2.5 s on 50 J; together 1280 tokens."""

    def rank(r: int, seconds: float, energy_j: float, target: TargetOutcome) -> RankResult:
        return RankResult(
            rank=r, local_rank=r, host="h", repeat=0, tokens=640, seconds=seconds,
            compute_s=seconds, comm_s=0.0, wait_s=0.0, step_times_s=(0.1,) * 20,
            peak_mem_bytes=1, flops=1e9, loss=3.2, n_microbatches=1,
            energy=EnergyWindow("rapl", True, seconds, energy_j), target=target,
        )  # fmt: skip

    best = 2.9 if reached else 3.1
    return [
        rank(0, 2.0, 100.0, outcome(reached, joules=(40.0, 100.0), eval_j=5.0,
                                    seconds=(1.0, 2.0), eval_s=0.4, best=best)),
        rank(1, 2.5, 50.0, outcome(reached, joules=(rank1_joules, 50.0), eval_j=2.0,
                                   seconds=(1.2, 2.5), eval_s=0.5, best=best)),
    ]  # fmt: skip


def aggregate(rank_results: list[RankResult], idle_power_w: float | None = 10.0):
    return aggregate_repeat(
        rank_results, idle_power_w=idle_power_w, peak_flops=None, n_devices=2,
        carbon_g_per_kwh=None,
    )  # fmt: skip


def test_a_repeat_that_reached_the_target_has_its_own_figures_to_it() -> None:
    r = aggregate(ranks(reached=True))
    assert (r.target_loss, r.target_reached, r.target_stopped_by) == (3.0, True, "reached")
    assert r.steps_to_target == 20
    assert r.tokens_to_target == r.tokens == 1280
    assert r.seconds_to_target == r.seconds == 2.5  # the slowest rank's training
    assert r.energy_to_target_j == r.energy_j == 150.0  # gross: summed like energy_j
    assert r.energy_to_target_net_j == r.energy_net_j == pytest.approx(150.0 - 10.0 * 2.5)
    assert r.best_val_loss == 2.9
    assert r.eval_s == 0.5  # the slowest rank's evaluation
    assert r.eval_energy_j == 7.0  # summed over the ranks' meters, outside energy_j


def test_a_repeat_that_did_not_reach_has_no_figure_to_target() -> None:
    r = aggregate(ranks(reached=False))
    assert (r.target_loss, r.target_reached, r.target_stopped_by) == (3.0, False, "max_steps")
    for name in ("steps_to_target", "tokens_to_target", "seconds_to_target",
                 "energy_to_target_j", "energy_to_target_net_j"):  # fmt: skip
        assert getattr(r, name) is None, name
    # the training figures stay what was measured; so does how close it came
    assert (r.seconds, r.energy_j, r.tokens) == (2.5, 150.0, 1280)
    assert r.best_val_loss == 3.1


def test_net_energy_to_target_follows_the_repeat_s_idle_rule() -> None:
    unreliable = aggregate(ranks(reached=True), idle_power_w=100.0)  # above the mean power
    assert unreliable.idle_note and unreliable.energy_net_j is None
    assert unreliable.energy_to_target_net_j is None
    assert unreliable.energy_to_target_j == 150.0
    none = aggregate(ranks(reached=True), idle_power_w=None)
    assert none.energy_to_target_net_j is None


def test_the_curve_sums_joules_over_ranks_and_takes_the_slowest_seconds() -> None:
    curve = aggregate(ranks(reached=True)).val_curve
    assert [(p.step, p.tokens, p.val_loss) for p in curve] == [(10, 640, 3.4), (20, 1280, 2.9)]
    assert [p.seconds for p in curve] == [1.2, 2.5]
    assert [p.joules for p in curve] == [70.0, 150.0]
    # a point one rank's meter could not read is unknown, never a partial sum
    unknown = aggregate(ranks(reached=True, rank1_joules=None)).val_curve
    assert [p.joules for p in unknown] == [None, 150.0]


def test_a_window_run_has_no_target_figures() -> None:
    plain = [
        RankResult(rank=0, local_rank=0, host="h", repeat=0, tokens=10, seconds=1.0,
                   compute_s=1.0, comm_s=0.0, wait_s=0.0, step_times_s=(0.5, 0.5),
                   peak_mem_bytes=1, flops=1.0, loss=2.0, n_microbatches=1, energy=None)
    ]  # fmt: skip
    r = aggregate(plain)
    assert r.target_loss is None and r.target_reached is None and r.best_val_loss is None
    assert r.val_curve == ()


def test_ranks_that_disagree_are_refused() -> None:
    mixed = ranks(reached=True)
    mixed[1] = RankResult.from_dict(mixed[1].to_dict() | {"target": None})
    with pytest.raises(ValueError, match="some ranks"):
        aggregate(mixed)
    other = ranks(reached=True)
    other[1] = RankResult.from_dict(
        other[1].to_dict() | {"target": ranks(reached=False)[1].target.to_dict()}
    )
    with pytest.raises(ValueError, match="different targets"):
        aggregate(other)


def test_the_outcome_survives_the_trip_from_rank_to_launcher() -> None:
    rank = ranks(reached=True)[0]
    assert RankResult.from_dict(rank.to_dict()) == rank
    repeat = aggregate(ranks(reached=True))
    assert repeat.to_dict()["val_curve"][1] == {
        "step": 20, "tokens": 1280, "seconds": 2.5, "joules": 150.0, "val_loss": 2.9,
    }  # fmt: skip


def _repeat(reached: bool, joules: float | None, seconds: float, best: float) -> dict:
    return {"target_reached": reached, "energy_to_target_j": joules if reached else None,
            "energy_to_target_net_j": None, "seconds_to_target": seconds if reached else None,
            "tokens_to_target": 1000 if reached else None, "best_val_loss": best}  # fmt: skip


def test_a_run_s_median_to_target_counts_a_miss_above_every_repeat_that_reached() -> None:
    two_of_three = [_repeat(True, 100.0, 1.0, 2.9), _repeat(False, None, 0, 3.2),
                    _repeat(True, 300.0, 3.0, 2.8)]  # fmt: skip
    m = target_medians(two_of_three)
    assert (m["n_reached"], m["n_to_target"]) == (2, 3)
    assert m["energy_to_target_j"] == 300.0  # sorted 100, 300, miss: not the median of 100, 300
    assert m["seconds_to_target"] == 3.0 and m["tokens_to_target"] == 1000
    assert m["energy_to_target_net_j"] is None  # no repeat knows it
    assert m["best_val_loss"] == 2.9  # plain: every repeat measured it
    one_of_two = target_medians([_repeat(True, 100.0, 1.0, 2.9), _repeat(False, None, 0, 3.2)])
    assert one_of_two["energy_to_target_j"] is None  # half missed: the median is unknown
    assert target_medians([])["n_to_target"] == 0
    window = target_medians([{"target_reached": None, "energy_to_target_j": None}])
    assert window["n_to_target"] == 0 and all(window[f] is None for f in TARGET_FIGURES)


def test_a_repeat_that_reached_with_its_energy_unknown_is_left_out_not_a_miss() -> None:
    m = target_medians([_repeat(True, None, 1.0, 2.9), _repeat(True, 200.0, 2.0, 2.9)])
    assert m["energy_to_target_j"] == 200.0 and not math.isinf(m["seconds_to_target"])
