"""`greenbench compare` over seeds and to a target loss: the runs of one seed group are one
comparison, each run's median one sample where its sides hold several seeds (the repeats where
they hold one, as before); the figures to a target are judged by J/token's rule, a repeat that
missed the target counted worse than every one that reached it."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from greenbench.compare import compare, compare_history, render_json, resolve_metric
from greenbench.compare.render import cells
from greenbench.reporting.seeds import samples, with_seed_group


def runs(
    values: list[list[float]],
    *,
    seed_group: str | None = "g1",
    first_seed: int = 0,
    column: str = "joules_per_token",
    prefix: str = "r",
    **cols: object,
) -> pd.DataFrame:
    """One run per list of values (each a repeat), run k with seed ``first_seed + k``: its own
    config_key, the seed group they share."""
    rows = []
    for k, repeats in enumerate(values):
        for j, value in enumerate(repeats):
            rows.append({
                "run_id": f"{prefix}{k}", "workload": "transformer-vs-mamba",
                "config_name": "transformer/tiny seq=128 single×1",
                "config_key": f"k-seed{first_seed + k}", "seed_group": seed_group,
                "energy_source": "rapl", "energy_measured": True, "device_type": "cpu:test",
                "nproc": 1, "nnodes": 1, "precision": "fp32", "repeat": j, column: value,
                "started_at": pd.Timestamp("2026-01-01") + pd.Timedelta(hours=k), **cols,
            })  # fmt: skip
    return pd.DataFrame(rows)


def test_runs_of_several_seeds_are_one_comparison_with_each_run_s_median_a_sample() -> None:
    # five seeds a side, three repeats each: the candidate's run medians 10 % above
    base = runs([[1.0 + s / 100, 1.0 + s / 100 + 0.001, 1.0 + s / 100 - 0.001] for s in range(5)])
    cand = runs([[1.1 + s / 100] * 3 for s in range(5)], prefix="c")
    verdict = compare(base, cand)
    (row,) = verdict.rows
    assert (row.seeds, row.seed_group) == (5, "g1")
    assert (row.n_baseline, row.n_candidate) == (5, 5)  # runs, not 15 repeats each
    assert row.status == "regression" and verdict.exit_code == 3
    assert "over 5 seeds: one sample per run (its median)" in row.note
    assert row.baseline_median == pytest.approx(1.02)


def test_one_seed_each_side_the_same_pools_repeats_as_before() -> None:
    base = runs([[1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0]])
    cand = runs([[1.1, 1.11, 1.09, 1.1, 1.12, 1.08, 1.1]], prefix="c")
    (row,) = compare(base, cand).rows
    assert row.seeds == 1 and (row.n_baseline, row.n_candidate) == (7, 7)
    assert row.status == "regression" and "seeds" not in row.note


def test_another_seed_on_each_side_is_compared_per_run_never_as_repeats() -> None:
    """Seed 0 against seed 1: one seed group, but the repeats of one seed are not samples of
    the other's: one run a side is too few to judge."""
    base = runs([[1.0] * 7])
    cand = runs([[1.5] * 7], first_seed=1, prefix="c")
    (row,) = compare(base, cand).rows
    assert row.seeds == 2 and (row.n_baseline, row.n_candidate) == (1, 1)
    assert row.status == "inconclusive" and "need more repeats" in row.note


def test_rows_without_a_seed_group_are_each_configuration_s_own_as_before() -> None:
    base = runs([[1.0] * 7, [1.0] * 7], seed_group=None)
    cand = runs([[1.0] * 7, [1.0] * 7], seed_group=None, prefix="c")
    verdict = compare(base, cand)
    assert [r.seeds for r in verdict.rows] == [1, 1]  # two configurations, by config_key
    assert {r.seed_group for r in verdict.rows} == {"k-seed0", "k-seed1"}
    assert list(with_seed_group(base.drop(columns="seed_group"))["seed_group"].unique()) == [
        "k-seed0", "k-seed1",
    ]  # fmt: skip


def target_runs(values: list[list[float | None]], prefix: str) -> pd.DataFrame:
    """Runs to a target: None is a repeat that did not reach it (no energy to target)."""
    df = runs(values, column="energy_to_target_j", prefix=prefix)
    df["target_reached"] = df["energy_to_target_j"].notna()
    return df


def test_energy_to_target_is_judged_by_the_rule_of_joules_per_token() -> None:
    assert resolve_metric("energy_to_target").column == "energy_to_target_j"
    base = target_runs([[100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0]], "b")
    cand = target_runs([[110.0, 111.0, 109.0, 110.0, 112.0, 108.0, 110.0]], "c")
    (row,) = compare(base, cand, metrics=["energy_to_target_j"]).rows
    (same,) = compare(
        base.rename(columns={"energy_to_target_j": "joules_per_token"}),
        cand.rename(columns={"energy_to_target_j": "joules_per_token"}),
    ).rows
    assert row.status == same.status == "regression"
    assert (row.ratio, row.p_worse_holm) == (same.ratio, same.p_worse_holm)


def test_a_repeat_that_missed_the_target_counts_worse_than_every_one_that_reached() -> None:
    base = target_runs([[100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0]], "b")
    # the candidate reaches cheaper when it reaches, but misses four times in seven
    cand = target_runs([[90.0, None, None, 91.0, None, None, 89.0]], "c")
    verdict = compare(base, cand, metrics=["energy_to_target_j"])
    (row,) = verdict.rows
    assert row.n_candidate == 7  # the misses are samples, not left out
    assert math.isinf(row.candidate_median)
    assert row.status == "unchanged"  # never "cheaper" for the runs it did not finish
    assert "not reached" in row.note and "candidate 4 of 7 repeats" in row.note
    assert cells(row)[7] == "not reached" and cells(row)[8] == "n/a"
    payload = json.loads(render_json(verdict))
    assert payload["rows"][0]["candidate_median"] is None  # JSON has no infinity
    # left out, the misses would have made the candidate an improvement
    reached_only = cand[cand.target_reached]
    better = compare(base, reached_only, metrics=["energy_to_target_j"]).rows[0]
    assert better.ratio < 1 and better.status == "improvement"
    # a candidate that never reaches the target is a regression against one that always does
    never = target_runs([[None] * 7], "c")
    (worse,) = compare(base, never, metrics=["energy_to_target_j"]).rows
    assert worse.status == "regression" and "candidate 7 of 7 repeats" in worse.note


def test_runs_that_all_missed_are_not_compared() -> None:
    base = target_runs([[None] * 7], "b")
    cand = target_runs([[None] * 7], "c")
    (row,) = compare(base, cand, metrics=["energy_to_target_j"]).rows
    assert row.status == "inconclusive" and "not reached" in row.note


def test_history_over_seeds_takes_each_run_s_median() -> None:
    history = runs([[1.0 + s / 100] * 3 for s in range(5)], prefix="h")
    history["git_sha"] = "sha-" + history["run_id"]  # each run a commit of its own
    new = runs([[1.3] * 3], first_seed=9, prefix="n", git_sha="sha-new")
    (row,) = compare_history(history, new).rows
    assert row.n_baseline == 5 and row.status == "regression"
    assert row.seeds == 6 and "over 6 seeds" in row.note


def test_samples_are_repeats_or_run_medians() -> None:
    df = runs([[1.0, 2.0, 9.0], [3.0, 3.0, 3.0]])
    assert sorted(samples(df, "joules_per_token", per_run=False)) == [1, 2, 3, 3, 3, 9]
    assert sorted(samples(df, "joules_per_token", per_run=True)) == [2.0, 3.0]
    missed = target_runs([[5.0, None, None]], "x")
    censored = samples(missed, "energy_to_target_j", per_run=True, to_target=True)
    assert np.isinf(censored).all()  # two misses of three: the run's median is a miss
