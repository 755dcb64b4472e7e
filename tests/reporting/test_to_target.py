"""greenbench.reporting.to_target: runs to a target pooled over seeds, a run that did not reach
counted as above every one that did (never an invented figure), cells written "not reached
(best …)", intervals over seeds named for what they are, and the to-target front ranking
partial-model runs."""

from __future__ import annotations

import math

import pandas as pd
from target_helpers import TargetRun, as_rows, seeds, skippipe_runs

from greenbench.reporting.to_target import (
    Spread,
    cell,
    censored,
    distinct_names,
    seed_rows,
    seeds_caption,
    spread,
    target_board,
    target_front,
)

FAMILY = {"model.family": "mamba"}


def board_of(runs: list[TargetRun]) -> pd.DataFrame:
    return target_board(seed_rows(as_rows(runs)))


def test_a_run_that_did_not_reach_counts_above_every_run_that_did():
    assert censored([3.0, None, 5.0], [True, False, True]) == [3.0, math.inf, 5.0]
    # a reached repeat whose meter could not be read is left out, never guessed
    assert censored([None, 2.0], [True, True]) == [2.0]
    two = Spread.of([10.0, math.inf])
    assert not two.reached and two.low == 10.0 and math.isinf(two.high)
    three = Spread.of([10.0, 12.0, math.inf])
    assert three.median == 12.0 and three.reached and math.isinf(three.high)


def test_each_seed_is_one_sample_its_repeats_pooled():
    run = TargetRun(
        "r0", {"seed": 0}, [(True, 10.0, 100.0, 3.9), (True, 14.0, 140.0, 3.9),
                            (False, 30.0, 300.0, 4.2)],
    )  # fmt: skip
    seed = seed_rows(as_rows([run])).iloc[0]
    assert seed["n_repeats"] == 3 and seed["n_reached"] == 2 and seed["reached"]
    assert seed["seconds_to_target"] == 14.0  # median of 10, 14 and "more than its budget"
    assert seed["best_not_reached"] == 4.2


def test_a_configuration_pools_its_seeds_with_a_named_interval():
    runs = seeds("t", {}, [(True, 10.0, 100.0, 0), (True, 12.0, 130.0, 0), (True, 11.0, 90.0, 0)])
    board = board_of(runs)
    assert len(board) == 1
    r = board.iloc[0]
    assert (r["n_seeds"], r["n_reached"]) == (3, 3)
    assert spread(r, "seconds_to_target") == Spread(11.0, 10.0, 12.0, 3)
    assert cell(spread(r, "energy_to_target_j"), unit="J") == "100 J [90–130]"
    caption = seeds_caption(board["n_seeds"])
    assert "min–max range of the seeds" in caption and "not a CI" in caption and "wide" in caption


def test_not_reached_shows_the_best_loss_never_a_figure():
    runs = seeds("m", FAMILY, [(False, 60.0, 600.0, 4.123), (False, 60.0, 600.0, 4.3)])
    r = board_of(runs).iloc[0]
    assert (r["n_reached"], r["n_seeds"]) == (0, 2)
    for figure in ("energy_to_target_j", "seconds_to_target", "tokens_to_target"):
        assert cell(spread(r, figure), float(r["best_not_reached"])) == "not reached (best 4.12)"


def test_half_the_seeds_reaching_leaves_the_median_not_reached():
    runs = seeds("m", FAMILY, [(True, 20.0, 200.0, 0), (False, 60.0, 600.0, 4.5)])
    r = board_of(runs).iloc[0]
    assert r["n_reached"] == 1
    assert cell(spread(r, "seconds_to_target"), r["best_not_reached"]) == "not reached (best 4.5)"
    runs = seeds("m", FAMILY, [(True, 20.0, 200.0, 0), (True, 22.0, 220.0, 0),
                               (False, 60.0, 600.0, 4.5)])  # fmt: skip
    r = board_of(runs).iloc[0]
    assert cell(spread(r, "seconds_to_target")) == "22 [20–not reached]"


def test_one_seed_has_no_interval():
    r = board_of(seeds("t", {}, [(True, 10.0, 100.0, 0)])).iloc[0]
    assert cell(spread(r, "seconds_to_target")) == "10"
    assert "no interval where there is one seed" in seeds_caption([1])


def test_measured_and_estimated_energy_are_never_pooled():
    runs = [
        *seeds("a", {}, [(True, 10.0, 100.0, 0), (True, 11.0, 110.0, 0)]),
        TargetRun("e0", {"seed": 5}, [(True, 10.5, 105.0, 0)], source="estimate", measured=False),
    ]
    board = board_of(runs)
    assert sorted(board["energy"]) == ["estimate", "measured (rapl)"]
    assert sorted(board["n_seeds"]) == [1, 2]


def test_partial_model_runs_are_ranked_on_the_to_target_front():
    # SkipPipe (partial model) reaches it faster and leaner than the full pipeline: it is on
    # the front, and the full pipeline, dominated, is not
    runs = skippipe_runs(
        skip=[(True, 10.0, 100.0, 0), (True, 11.0, 110.0, 0)],
        aware=[(True, 20.0, 200.0, 0), (True, 21.0, 210.0, 0)],
    )
    board = board_of(runs)
    front = target_front(board)
    partial = board["partial_model"].astype(bool)
    assert partial.sum() == 1 and front[partial].all() and not front[~partial].any()


def test_a_configuration_that_did_not_reach_is_on_no_front():
    runs = [
        *seeds("t", {}, [(True, 10.0, 100.0, 0), (True, 11.0, 110.0, 0)]),
        *seeds("m", FAMILY, [(False, 5.0, 50.0, 4.4), (False, 5.0, 50.0, 4.4)]),
    ]
    board = board_of(runs)
    front = target_front(board)
    assert list(board[front]["config_name"]) == ["transformer/tiny seq=128 fixed single×1"]


def test_configurations_that_share_a_name_are_told_apart_by_their_target():
    runs = [
        TargetRun("a0", {"seed": 0}, [(True, 10.0, 100.0, 0)]),
        TargetRun("b0", {"seed": 0, "target.gap_closed": 0.3}, [(True, 5.0, 50.0, 0)], target=5.5),
        TargetRun("m0", {"seed": 0, "model.family": "mamba"}, [(True, 10.0, 100.0, 0)]),
    ]
    names = dict(zip(board_of(runs)["latest_run_id"], distinct_names(board_of(runs)), strict=True))
    assert names == {
        "a0": "transformer/tiny seq=128 fixed single×1 · target 4",
        "b0": "transformer/tiny seq=128 fixed single×1 · target 5.5",
        "m0": "mamba/tiny seq=128 fixed single×1",
    }
