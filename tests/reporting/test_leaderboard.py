"""Tests of the dashboard's pure core: Pareto fronts, leaderboard aggregation, history."""

from __future__ import annotations

import json
import math
import statistics
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from greenbench.errors import SpecError
from greenbench.reporting.leaderboard import (
    METRICS,
    REPEAT_COLUMNS,
    comparable_front,
    history,
    leaderboard,
    own_measurement_mask,
    own_measurements,
    pareto_front,
    pareto_front_by,
    skipping_board,
    training_rows,
)
from greenbench.stats import median_ci

T0 = datetime(2026, 1, 1)


def pts(xy: list[tuple[float, float]], index: list[int] | None = None) -> pd.DataFrame:
    return pd.DataFrame(xy, columns=["x", "y"], index=index)


def front(xy: list[tuple[float, float]], xb: str = "max", yb: str = "min") -> list[bool]:
    return pareto_front(pts(xy), "x", "y", xb, yb).tolist()


# --- Pareto front ---------------------------------------------------------------------------------


def test_single_point_is_the_front() -> None:
    assert front([(3.0, 2.0)]) == [True]


def test_empty_frame_gives_empty_mask() -> None:
    assert front([]) == []


def test_speed_against_energy() -> None:
    # (tokens/s, J/token): faster-and-leaner dominates; a trade-off keeps both ends
    xy = [(100, 1.0), (200, 2.0), (150, 2.5), (50, 0.9), (200, 3.0)]
    assert front(xy) == [True, True, False, True, False]


def test_tie_on_one_axis_keeps_only_the_better_on_the_other() -> None:
    assert front([(100, 1.0), (100, 2.0)]) == [True, False]  # same speed, less energy wins
    assert front([(100, 1.0), (120, 1.0)]) == [False, True]  # same energy, faster wins


def test_exact_duplicates_both_stay() -> None:
    # neither is strictly better anywhere, so neither dominates the other
    assert front([(100, 1.0), (100, 1.0), (90, 2.0)]) == [True, True, False]


def test_direction_of_each_axis_is_respected() -> None:
    xy = [(1, 1), (2, 2)]
    assert front(xy, "max", "max") == [False, True]
    assert front(xy, "min", "min") == [True, False]
    assert front(xy, "max", "min") == [True, True]
    assert front(xy, "min", "max") == [True, True]


def test_nan_rows_are_never_on_the_front_and_dominate_nothing() -> None:
    assert front([(math.nan, 0.1), (100, 1.0), (1e9, math.nan)]) == [False, True, False]
    assert front([(math.nan, math.nan)]) == [False]


def test_mask_is_aligned_with_the_frames_index() -> None:
    df = pts([(1, 5), (2, 1), (3, 3)], index=[30, 10, 20])
    mask = pareto_front(df, "x", "y", "max", "min")
    assert list(mask.index) == [30, 10, 20]
    assert mask.to_dict() == {30: False, 10: True, 20: True}


def test_bad_direction_is_rejected() -> None:
    with pytest.raises(ValueError, match="better"):
        pareto_front(pts([(1, 1)]), "x", "y", "higher", "min")  # type: ignore[arg-type]


def brute_force(xy: list[tuple[float, float]], xb: str, yb: str) -> list[bool]:
    sx = -1 if xb == "max" else 1
    sy = -1 if yb == "max" else 1
    p = [(sx * x, sy * y) for x, y in xy]
    return [
        not any(
            a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])
            for j, a in enumerate(p)
            if j != i
        )
        for i, b in enumerate(p)
    ]


@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=25),
    st.sampled_from(["max", "min"]),
    st.sampled_from(["max", "min"]),
)
def test_front_matches_the_definition(xy: list[tuple[int, int]], xb: str, yb: str) -> None:
    # small integer grids force many ties on one or both axes
    assert front([(float(x), float(y)) for x, y in xy], xb, yb) == brute_force(xy, xb, yb)


def test_front_by_group_keeps_groups_apart() -> None:
    df = pd.DataFrame(
        {"x": [100, 200, 50], "y": [1.0, 0.5, 2.0], "kind": ["measured", "measured", "estimate"]}
    )
    # the estimate is dominated by both measurements, yet it is the front of its own group
    assert pareto_front_by(df, "x", "y", "max", "min", "kind").tolist() == [False, True, True]
    assert pareto_front(df, "x", "y", "max", "min").tolist() == [False, True, False]


# --- leaderboard ----------------------------------------------------------------------------------


def repeat_rows(
    config_key: str,
    tps: list[float],
    jpt: list[float | None],
    *,
    sha: str | None = "new",
    run_id: str = "r1",
    source: str = "rapl",
    hours: int = 0,
    workload: str = "transformer-vs-mamba",
) -> list[dict[str, object]]:
    rows = []
    for i, (t, j) in enumerate(zip(tps, jpt, strict=True)):
        row: dict[str, object] = {c: None for c in REPEAT_COLUMNS}
        row |= {
            "run_id": run_id,
            "suite": "smoke",
            "config_key": config_key,
            "workload": workload,
            "config_name": f"{config_key} name",
            "model_family": "transformer",
            "model_size": "tiny",
            "strategy": "single",
            "layout": "dp1",
            "device": "cpu",
            "device_type": "cpu:test",
            "precision": "fp32",
            "seq_len": 256,
            "lengths": "fixed",
            "peak_flops_source": "cpu-gemm-calibration",
            "nproc": 2,
            "nnodes": 1,
            "git_sha": sha,
            "started_at": T0 + timedelta(hours=hours),
            "repeat": i,
            "tokens": 1000,
            "energy_source": source,
            "energy_measured": source != "estimate",
            "co2_g": None if j is None else j * 1000 * 0.1,
            "tokens_per_s": t,
            "joules_per_token": j,
            "net_joules_per_token": None if j is None else j / 2,
            "mfu": 0.01 * (i + 1),
            "peak_mem_bytes": 100 * (i + 1),
            "wait_fraction": 0.1,
            "step_time_p50_s": 0.5,
            "loss": 7.0,
        }
        rows.append(row)
    return rows


def frame(*groups: list[dict[str, object]]) -> pd.DataFrame:
    return pd.DataFrame([r for g in groups for r in g])


def test_one_row_per_configuration_with_median_and_ci() -> None:
    tps = [10.0, 12.0, 11.0, 30.0, 9.0]
    jpt = [0.5, 0.4, 0.45, 0.3, 0.6]
    board = leaderboard(frame(repeat_rows("a", tps, jpt)))
    assert len(board) == 1
    row = board.iloc[0]
    assert row["tokens_per_s"] == statistics.median(tps)
    med, low, high = median_ci(jpt)
    assert (row["joules_per_token"], row["joules_per_token_ci_low"]) == (med, low)
    assert row["joules_per_token_ci_high"] == high
    assert row["net_joules_per_token"] == pytest.approx(med / 2)
    assert row["peak_mem_bytes"] == 500  # the peak over repeats, not a median
    assert row["mfu"] == pytest.approx(0.03)
    assert row["co2_g_per_mtok"] == pytest.approx(med * 0.1 * 1e6)
    assert row["devices"] == 2
    assert (row["n_repeats"], row["n_runs"], row["git_sha"]) == (5, 1, "new")
    assert row["latest_run_id"] == "r1"


def test_single_repeat_gives_a_degenerate_interval() -> None:
    board = leaderboard(frame(repeat_rows("a", [10.0], [0.5])))
    row = board.iloc[0]
    assert row["tokens_per_s"] == row["tokens_per_s_ci_low"] == row["tokens_per_s_ci_high"] == 10


def test_latest_scope_uses_only_the_newest_sha_and_all_pools() -> None:
    rows = frame(
        repeat_rows("a", [10, 10, 10], [1.0, 1.0, 1.0], sha="old", run_id="r0", hours=0),
        repeat_rows("a", [20, 20, 20], [0.5, 0.5, 0.5], sha="new", run_id="r1", hours=5),
    )
    latest = leaderboard(rows, "latest").iloc[0]
    assert (latest["tokens_per_s"], latest["n_repeats"], latest["git_sha"]) == (20, 3, "new")
    pooled = leaderboard(rows, "all").iloc[0]
    assert (pooled["tokens_per_s"], pooled["n_repeats"], pooled["n_runs"]) == (15, 6, 2)
    assert pooled["git_sha"] == "mixed"
    assert pooled["latest_run_id"] == "r1"


def test_two_runs_of_the_newest_sha_are_pooled() -> None:
    rows = frame(
        repeat_rows("a", [10, 12], [1.0, 1.0], run_id="r0", hours=0),
        repeat_rows("a", [14, 16], [1.0, 1.0], run_id="r1", hours=1),
    )
    row = leaderboard(rows).iloc[0]
    assert (row["n_repeats"], row["n_runs"], row["tokens_per_s"]) == (4, 2, 13)


def test_measured_and_estimated_energy_are_never_pooled() -> None:
    rows = frame(
        repeat_rows("a", [10, 10], [1.0, 1.0], source="rapl", run_id="r0"),
        repeat_rows("a", [10, 10], [3.0, 3.0], source="estimate", run_id="r1", hours=1),
    )
    board = leaderboard(rows, "all")
    assert sorted(zip(board["energy_source"], board["joules_per_token"], strict=True)) == [
        ("estimate", 3.0),
        ("rapl", 1.0),
    ]
    assert board.set_index("energy_source").loc["estimate", "energy_measured"] == False  # noqa: E712


def test_simulated_runs_are_never_on_the_board() -> None:
    measured = repeat_rows("a", [10, 10], [1.0, 1.0], source="rapl", run_id="r0")
    by_source = repeat_rows("b", [99, 99], [0.1, 0.1], source="model", run_id="r1", hours=1)
    by_flag = [r | {"simulated": True} for r in repeat_rows("c", [9, 9], [0.2, 0.2], run_id="r2")]
    unknown = [r | {"simulated": None} for r in repeat_rows("d", [8, 8], [2.0, 2.0], run_id="r3")]
    board = leaderboard(frame(measured, by_source, by_flag, unknown), "all")
    assert sorted(board["config_key"]) == ["a", "d"]  # NULL (before the column): measured
    assert leaderboard(frame(by_source)).empty


def test_own_measurements_are_never_on_the_training_board() -> None:
    # a one-second sleep measured with --tokens 1000 ranked second by J/token, with None cells
    training = repeat_rows("a", [10, 10], [1.0, 1.0], run_id="r0")
    loop = [
        r | {"strategy": "own-loop", "workload": "loop/mine"}
        for r in repeat_rows("b", [5, 5], [0.1, 0.1], run_id="r1")
    ]
    process = [
        r | {"strategy": "whole-process", "workload": "process/sleep", "mfu": None}
        for r in repeat_rows("c", [1000, 1000], [0.5, 0.5], run_id="r2")
    ]
    rows = frame(training, loop, process)
    assert own_measurement_mask(rows).tolist() == [False] * 2 + [True] * 4
    assert sorted(training_rows(rows)["config_key"].unique()) == ["a"]
    assert leaderboard(rows, "all")["config_key"].tolist() == ["a"]
    assert leaderboard(frame(loop, process)).empty


def test_own_measurement_mask_reads_the_workload_where_rows_have_no_strategy() -> None:
    from greenbench.measuring.record import LOOP_STRATEGY, PROCESS_STRATEGY
    from greenbench.reporting.leaderboard import OWN_MEASUREMENT_STRATEGIES

    assert set(OWN_MEASUREMENT_STRATEGIES) == {LOOP_STRATEGY, PROCESS_STRATEGY}
    rows = pd.DataFrame({"workload": ["loop/x", "process/y", "transformer-vs-mamba"]})
    assert own_measurement_mask(rows).tolist() == [True, True, False]
    assert own_measurement_mask(pd.DataFrame({"x": [1]})).tolist() == [False]


def test_own_measurements_pool_on_their_own_board() -> None:
    training = repeat_rows("a", [10, 10], [1.0, 1.0], run_id="r0")
    process = [
        r | {"strategy": "whole-process", "workload": "process/sleep"}
        for r in repeat_rows("c", [1000, 1000, 1000], [0.5, 0.6, 0.7], run_id="r2")
    ]
    own = own_measurements(frame(training, process))
    assert own["config_key"].tolist() == ["c"]
    assert own.iloc[0]["joules_per_token"] == 0.6 and own.iloc[0]["n_repeats"] == 3
    assert own_measurements(frame(training)).empty


def skipping(key: str, jpt: float, tps: float, skip: float, schedule: str = "skippipe"):
    settings = {"strategy": "skippipe", "skippipe.schedule": schedule, "skippipe.skip": skip}
    named = f" skip={skip:g}" if not schedule.startswith("full") else ""
    name = f"t/tiny skippipe[{schedule} 1-2-1{named}]"
    return [
        r | {"strategy": "skippipe", "workload": "skippipe", "config_name": name,
             "config": json.dumps({"settings": settings})}
        for r in repeat_rows(key, [tps, tps], [jpt, jpt], run_id=f"run-{key}")
    ]  # fmt: skip


def test_a_skipping_run_is_never_on_the_leaderboard_but_on_a_board_of_its_own() -> None:
    # SkipPipe skipping half its stages: fewest J/token of all, yet it trains half the model
    rows = frame(
        repeat_rows("dense", [10, 10], [1.0, 1.0], run_id="r0"),
        skipping("full", 2.0, 8.0, 0.5, schedule="full"),
        skipping("aware", 1.9, 8.5, 0.5, schedule="full-aware"),
        skipping("skip", 0.4, 20.0, 0.5),
        skipping("rand", 0.5, 18.0, 0.5, schedule="random"),
    )
    board = leaderboard(rows)
    assert board["config_key"].tolist() == ["dense", "aware", "full"]
    assert not board["partial_model"].any() and board["skipped_fraction"].tolist() == [0.0] * 3
    apart = skipping_board(rows)
    assert apart["config_key"].tolist() == ["skip", "rand"]
    assert apart["partial_model"].all() and apart["skipped_fraction"].tolist() == [0.5, 0.5]
    # without its config the name tells it (the dashboard's rows carry no config)
    named = rows.drop(columns=["config"])
    assert leaderboard(named)["config_key"].tolist() == ["dense", "aware", "full"]
    assert skipping_board(named)["config_key"].tolist() == ["skip", "rand"]


def test_fronts_are_per_workload_and_energy_source_and_leave_partial_model_runs_off() -> None:
    rows = frame(
        repeat_rows("dense", [10, 10], [1.0, 1.0], run_id="r0"),
        repeat_rows("slow", [5, 5], [2.0, 2.0], run_id="r1"),
        repeat_rows("other", [1, 1], [9.0, 9.0], run_id="r2", workload="hybrid"),
        skipping("full", 2.0, 8.0, 0.5, schedule="full"),
        skipping("skip", 0.4, 20.0, 0.5),
    )
    board = pd.concat([leaderboard(rows), skipping_board(rows)], ignore_index=True)
    front = comparable_front(board, "tokens_per_s", "joules_per_token", "max", "min")
    on = dict(zip(board["config_key"], front, strict=True))
    # one front per workload: hybrid's slow, costly run is its own workload's front
    assert on == {"dense": True, "slow": False, "other": True, "full": True, "skip": False}
    # across workloads, one front would have dropped hybrid's run and the full pipeline
    assert not pareto_front(board, "tokens_per_s", "joules_per_token", "max", "min")[
        board["config_key"].isin(["other", "full"])
    ].any()


def test_missing_energy_gives_nan_not_zero() -> None:
    board = leaderboard(frame(repeat_rows("a", [10.0, 11.0], [None, None])))
    row = board.iloc[0]
    assert math.isnan(row["joules_per_token"]) and math.isnan(row["co2_g_per_mtok"])
    assert row["tokens_per_s"] == 10.5


def test_board_is_sorted_by_joules_per_token_with_unknown_energy_last() -> None:
    rows = frame(
        repeat_rows("slow", [1.0], [2.0]),
        repeat_rows("none", [1.0], [None]),
        repeat_rows("lean", [1.0], [0.5]),
    )
    assert leaderboard(rows)["config_key"].tolist() == ["lean", "slow", "none"]


def test_unknown_git_sha_is_its_own_version() -> None:
    board = leaderboard(frame(repeat_rows("a", [1.0], [1.0], sha=None)))
    assert board.iloc[0]["git_sha"] == "unknown"


def test_empty_input_gives_empty_board_with_columns() -> None:
    board = leaderboard(pd.DataFrame(columns=list(REPEAT_COLUMNS)))
    assert board.empty
    assert {"config_key", "tokens_per_s_ci_low", "n_repeats"} <= set(board.columns)
    assert set(METRICS) <= set(board.columns)


def test_bad_scope_is_rejected() -> None:
    with pytest.raises(ValueError, match="scope"):
        leaderboard(frame(repeat_rows("a", [1.0], [1.0])), "newest")  # type: ignore[arg-type]


# --- history --------------------------------------------------------------------------------------


def test_history_orders_shas_by_first_run_and_summarises_each() -> None:
    rows = frame(
        repeat_rows("a", [10, 11, 12], [1.0, 1.1, 0.9], sha="s2", run_id="r2", hours=10),
        repeat_rows("a", [20, 21, 22], [0.5, 0.6, 0.4], sha="s1", run_id="r1", hours=1),
        repeat_rows("a", [30, 30, 30], [0.3, 0.3, 0.3], sha="s3", run_id="r3", hours=20),
        repeat_rows("b", [99], [9.9], sha="s1", run_id="rb", hours=0),
    )
    hist = history(rows, "a")
    assert hist["git_sha"].tolist() == ["s1", "s2", "s3"]
    assert hist["tokens_per_s"].tolist() == [21, 11, 30]
    assert hist["joules_per_token"].tolist() == [0.5, 1.0, 0.3]
    assert hist.iloc[0]["joules_per_token_ci_low"] == 0.4
    assert hist["n_repeats"].tolist() == [3, 3, 3]


def test_history_keeps_energy_sources_apart_and_can_select_one() -> None:
    rows = frame(
        repeat_rows("a", [10], [1.0], source="rapl", run_id="r1"),
        repeat_rows("a", [10], [5.0], source="estimate", run_id="r2", hours=1),
    )
    assert len(history(rows, "a")) == 2
    only = history(rows, "a", "estimate")
    assert only["energy_source"].tolist() == ["estimate"]
    assert only["joules_per_token"].tolist() == [5.0]


def test_history_of_unknown_configuration_is_empty() -> None:
    hist = history(frame(repeat_rows("a", [1.0], [1.0])), "zzz")
    assert hist.empty and "git_sha" in hist.columns


def test_history_counts_several_runs_of_one_sha() -> None:
    rows = frame(
        repeat_rows("a", [1.0, 3.0], [1.0, 1.0], run_id="r1", hours=0),
        repeat_rows("a", [5.0], [1.0], run_id="r2", hours=2),
    )
    hist = history(rows, "a")
    assert (len(hist), hist.iloc[0]["n_runs"], hist.iloc[0]["tokens_per_s"]) == (1, 2, 3.0)
    assert hist.iloc[0]["last_started_at"] - hist.iloc[0]["first_started_at"] == timedelta(hours=2)
    assert np.isclose(hist.iloc[0]["tokens_per_s_ci_high"], 5.0)


def _tag(rows: list[dict[str, object]], **cols: object) -> list[dict[str, object]]:
    return [row | cols for row in rows]


def test_history_by_branch_label_and_date() -> None:
    """The axis picks what a point pools; runs under two labels are never one point."""
    rows = frame(
        _tag(repeat_rows("a", [10, 10], [1.0, 1.0], sha="s1", run_id="m1", hours=0),
             git_branch="main", label="nightly"),
        _tag(repeat_rows("a", [12, 12], [1.2, 1.2], sha="s2", run_id="m2", hours=30),
             git_branch="main", label="nightly"),
        _tag(repeat_rows("a", [20, 20], [2.0, 2.0], sha="f1", run_id="f1", hours=1),
             git_branch="feature/x", label="nightly"),
        _tag(repeat_rows("a", [30, 30], [3.0, 3.0], sha="s1", run_id="e1", hours=2),
             git_branch="main", label="experiment"),
        _tag(repeat_rows("a", [40], [4.0], sha=None, run_id="o1", hours=3), label=None),
    )  # fmt: skip
    by_commit = history(rows, "a", by="commit")
    assert by_commit.attrs == {"by": "commit", "left_out": 1}  # o1 has no sha
    # commit s1 under two labels: two rows (series), never one pooled point
    s1 = by_commit[by_commit["point"] == "s1"].set_index("series")["joules_per_token"]
    assert s1.to_dict() == {"nightly": 1.0, "experiment": 3.0}
    by_branch = history(rows, "a", by="branch", label="nightly")
    assert by_branch["point"].tolist() == ["main", "feature/x"]  # first-run order
    assert by_branch["joules_per_token"].tolist() == [1.1, 2.0]  # main pools m1 and m2
    assert by_branch.loc[0, "git_sha"] == "mixed" and by_branch.loc[1, "git_sha"] == "f1"
    by_date = history(rows, "a", by="date", branch="main")
    assert list(zip(by_date["point"], by_date["series"], by_date["n_runs"], strict=True)) == [
        ("2026-01-01", "nightly", 1), ("2026-01-01", "experiment", 1),
        ("2026-01-02", "nightly", 1),
    ]  # fmt: skip
    by_label = history(rows, "a", by="label")
    assert set(by_label["point"]) == {"nightly", "experiment", "(no label)"}
    assert by_label.attrs["left_out"] == 0
    # a run without a sha makes the default axis the date: nothing is "unknown"
    assert history(rows, "a").attrs["by"] == "date"
    assert history(rows[rows["run_id"] != "o1"], "a").attrs["by"] == "commit"
    assert history(rows, "a", by="branch").attrs["left_out"] == 1  # o1: no branch
    with pytest.raises(SpecError, match="unknown history axis 'week'"):
        history(rows, "a", by="week")


def test_the_newest_version_keeps_two_labels_apart() -> None:
    """Runs outside a checkout (no sha) under two labels: the leaderboard's "latest" pools the
    newest label's runs only, not every run that shares the sha "unknown"."""
    rows = frame(
        _tag(repeat_rows("a", [10, 10], [1.0, 1.0], sha=None, run_id="x1", hours=0), label="x"),
        _tag(repeat_rows("a", [30, 30], [3.0, 3.0], sha=None, run_id="y1", hours=1), label="y"),
    )
    latest = leaderboard(rows).iloc[0]
    assert (latest["n_runs"], latest["tokens_per_s"], latest["latest_run_id"]) == (1, 30, "y1")
    assert leaderboard(rows, "all").iloc[0]["n_runs"] == 2
    # one sha, one label: its runs are one version, as before
    same = frame(
        _tag(repeat_rows("a", [10], [1.0], sha="s", run_id="r1", hours=0), label="x"),
        _tag(repeat_rows("a", [30], [3.0], sha="s", run_id="r2", hours=1), label="x"),
    )
    assert leaderboard(same).iloc[0]["n_runs"] == 2


def test_the_same_settings_on_two_gpu_types_are_two_rows():
    # one config_key, one energy source, two kinds of device: never pooled into one row
    h100 = repeat_rows("k", [100.0, 110.0, 120.0], [0.1, 0.1, 0.1], source="nvml", run_id="h")
    a100 = repeat_rows("k", [50.0, 55.0, 60.0], [0.2, 0.2, 0.2], source="nvml", run_id="a")
    for row in h100:
        row |= {"device": "cuda", "device_type": "NVIDIA H100 80GB HBM3"}
    for row in a100:
        row |= {"device": "cuda", "device_type": "NVIDIA A100-SXM4-80GB"}
    board = leaderboard(pd.DataFrame(h100 + a100))
    assert len(board) == 2
    by_device = board.set_index("device_type")["tokens_per_s"]
    assert by_device["NVIDIA H100 80GB HBM3"] == 110.0
    assert by_device["NVIDIA A100-SXM4-80GB"] == 55.0


# --- trust ----------------------------------------------------------------------------------------


def test_a_contended_run_is_marked_on_its_row_and_counted() -> None:
    clean = repeat_rows("a", [10.0] * 6, [0.5] * 6, run_id="r1")
    busy = repeat_rows("b", [10.0] * 6, [0.4] * 6, run_id="r2")
    for row in clean:
        row["contended"] = False
    for row in busy:
        row |= {"contended": True, "others_busy_cores": 1.25, "other_greenbench": 2}
    board = leaderboard(frame(clean, busy)).set_index("config_key")
    assert board.loc["b", "contended"] and board.loc["b", "n_contended_runs"] == 1
    assert board.loc["b", "others_busy_cores"] == 1.25 and board.loc["b", "other_greenbench"] == 2
    assert board.loc["b", "trust"] == "⚠ contended"
    assert not board.loc["a", "contended"] and board.loc["a", "trust"] == ""
    # rows without the trust columns (an older database) read as not known to be contended
    old = leaderboard(frame(repeat_rows("c", [10.0] * 6, [0.5] * 6))).iloc[0]
    assert old["trust"] == "" and pd.isna(old["contended"])


def test_net_energy_of_an_unreliable_idle_baseline_is_unknown_never_negative() -> None:
    rows = repeat_rows("a", [10.0, 11.0, 12.0], [0.5, 0.5, 0.5])
    rows[1]["idle_note"] = "idle baseline unreliable: sampled while the machine was busy"
    row = leaderboard(frame(rows)).iloc[0]
    assert pd.isna(row["net_joules_per_token"]) and row["n_idle_unreliable"] == 1
    assert "net unknown: idle unreliable" in row["trust"]
    # a negative net figure from a database that was never migrated is unknown as well
    older = repeat_rows("b", [10.0, 11.0], [0.5, 0.5])
    older[0]["net_joules_per_token"] = -0.0008318
    row = leaderboard(frame(older)).iloc[0]
    assert pd.isna(row["net_joules_per_token"]) and row["n_idle_unreliable"] == 1


def test_each_row_names_the_interval_its_repeats_allow() -> None:
    board = leaderboard(frame(repeat_rows("a", [1.0, 2.0], [1.0, 2.0], run_id="r1"),
                              repeat_rows("b", [1.0] * 6, [1.0] * 6, run_id="r2")))  # fmt: skip
    board = board.set_index("config_key")
    assert board.loc["a", "interval"] == "min–max range"
    assert board.loc["a", "trust"] == "min–max of 2"
    assert board.loc["b", "interval"] == "95 % CI"


def test_history_marks_a_sha_with_a_contended_run() -> None:
    rows = frame(
        repeat_rows("a", [10, 11, 12], [1.0, 1.1, 0.9], sha="s1", run_id="r1", hours=1),
        repeat_rows("a", [10, 11, 12], [1.0, 1.1, 0.9], sha="s2", run_id="r2", hours=2),
    )
    rows["contended"] = rows["run_id"] == "r2"
    hist = history(rows, "a").set_index("git_sha")
    assert hist.loc["s2", "n_contended_runs"] == 1 and "⚠ contended" in hist.loc["s2", "trust"]
    assert hist.loc["s1", "n_contended_runs"] == 0 and "contended" not in hist.loc["s1", "trust"]


def test_the_runs_of_one_seed_group_are_one_row_each_seed_s_run_one_sample() -> None:
    """Three seeds of one configuration (three config_keys, one seed group): one row, whose
    median and interval are over the runs' medians, not over the nine pooled repeats."""
    seeds = [
        repeat_rows(f"seed{k}", [10.0 + k] * 3, [0.5 + k / 10, 0.5 + k / 10, 0.9], run_id=f"r{k}",
                    hours=k)
        for k in range(3)
    ]  # fmt: skip
    rows = frame(*seeds).assign(seed_group="g")
    board = leaderboard(rows)
    assert len(board) == 1
    row = board.iloc[0]
    assert (row["n_seeds"], row["n_runs"], row["n_repeats"]) == (3, 3, 9)
    run_medians = [0.5, 0.6, 0.7]  # each run's median J/token
    med, low, high = median_ci(run_medians)
    assert (row["joules_per_token"], row["joules_per_token_ci_low"]) == (med, low)
    assert row["joules_per_token_ci_high"] == high == 0.7  # not the repeats' 0.9
    assert row["tokens_per_s"] == 11.0
    assert row["interval"] == "min–max range" and "min–max of 3" in row["trust"]  # 3 samples
    assert row["config_key"] == "seed2"  # the latest run's
    assert row["peak_mem_bytes"] == 300  # still the peak over every repeat


def test_without_a_seed_group_each_configuration_is_its_own_row_as_before() -> None:
    rows = frame(repeat_rows("a", [10.0] * 3, [0.5] * 3), repeat_rows("b", [10.0] * 3, [0.6] * 3,
                                                                      run_id="r2"))  # fmt: skip
    board = leaderboard(rows)  # rows from a database older than seed groups
    assert sorted(board["config_key"]) == ["a", "b"] and set(board["n_seeds"]) == {1}
    half = leaderboard(rows.assign(seed_group=["g"] * 3 + [None] * 3))
    assert sorted(half["seed_group"]) == ["b", "g"]  # the unknown group is its config_key
