"""Runs to a target loss and seed groups in the store (migration 13): an older database opens
with the new columns, its runs to no target and without a seed group; a new run stores its
figures to target per repeat, its validation curves, its target and its seed group; `list runs`
gives the medians to target as `target_medians` does; readers pool a run stored before seed
groups with the newer runs of its configuration."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from greenbench.aggregate.target import target_medians
from greenbench.reporting.refs import query_results
from greenbench.results import RunOutcome, ValPoint
from greenbench.store import Store, export, get_run, list_runs, read_frame
from greenbench.store import writer as store_mod
from tests.test_store import make_outcome, run_row, version_of

RESULT_COLUMNS = (
    "target_loss", "target_reached", "steps_to_target", "tokens_to_target", "seconds_to_target",
    "energy_to_target_j", "energy_to_target_net_j", "best_val_loss", "target_stopped_by",
    "eval_s", "eval_energy_j",
)  # fmt: skip
CURVE = (
    ValPoint(step=10, tokens=640, seconds=1.0, joules=50.0, val_loss=3.4),
    ValPoint(step=20, tokens=1280, seconds=2.1, joules=None, val_loss=2.9),
)


def to_target(reached: tuple[bool, ...]) -> RunOutcome:
    """`make_outcome`'s repeats as runs to the target 3.0, each reached or not."""
    base = make_outcome()
    repeats = []
    for k, hit in enumerate(reached):
        r = replace(base.repeats[0], repeat=k, energy_j=100.0 + k, energy_net_j=80.0 + k)
        repeats.append(replace(
            r, target_loss=3.0, target_reached=hit, steps_to_target=20 if hit else None,
            tokens_to_target=r.tokens if hit else None, seconds_to_target=r.seconds if hit
            else None, energy_to_target_j=r.energy_j if hit else None,
            energy_to_target_net_j=r.energy_net_j if hit else None,
            best_val_loss=2.9 if hit else 3.1, target_stopped_by="reached" if hit else "max_s",
            eval_s=0.3, eval_energy_j=4.0, val_curve=CURVE,
        ))  # fmt: skip
    return replace(base, repeats=repeats, ranks=[])


def columns(db: Path, table: str) -> set[str]:
    return set(read_frame(db, f"DESCRIBE {table}")["column_name"])


@pytest.fixture
def old_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A database as the version before targets and seed groups wrote it: one ok window run."""
    db = tmp_path / "old.duckdb"
    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "SCHEMA_VERSION", version_of("targets_and_seeds") - 1)
        store = Store(db)
        store.begin_run(run_row("a" * 12))
        con = duckdb.connect(str(db))  # as that version's launcher wrote them
        con.execute(
            "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, energy_source, "
            "energy_measured, energy_j, joules_per_token, peak_mem_bytes) VALUES "
            "('aaaaaaaaaaaa', 0, 2000, 2.0, 1000.0, 'rapl', true, 100.0, 0.05, 1)"
        )
        con.close()
        store.mark_run("a" * 12, "ok")
        assert "seed_group" not in columns(db, "runs")
        assert "target_loss" not in columns(db, "results")
        assert "val_curve" not in set(read_frame(db, "SHOW TABLES")["name"])
    return db


def test_an_older_database_opens_with_the_new_columns_and_its_runs_to_no_target(
    old_db: Path,
) -> None:
    Store(old_db)  # migrates
    assert set(RESULT_COLUMNS) <= columns(old_db, "results")
    assert {"target_loss", "seed_group"} <= columns(old_db, "runs")
    assert columns(old_db, "val_curve") == {
        "run_id", "repeat", "step", "tokens", "seconds", "joules", "val_loss"
    }  # fmt: skip
    run = get_run(old_db, "a" * 12)
    assert run["target_loss"] is None and run["seed_group"] is None and run["val_curve"] == []
    for r in run["results"]:
        assert all(r[c] is None for c in RESULT_COLUMNS)
    assert r["joules_per_token"] == 0.05  # the window's figures as they were
    listed = list_runs(old_db).iloc[0]
    assert pd.isna(listed.n_reached) and pd.isna(listed.energy_to_target_j_median)
    versions = read_frame(old_db, "SELECT max(version) AS v FROM schema_version")
    assert int(versions.v.iloc[0]) == store_mod.SCHEMA_VERSION


def test_a_run_to_a_target_stores_its_figures_its_curves_and_its_seed_group(
    tmp_path: Path,
) -> None:
    db = tmp_path / "g.duckdb"
    outcome = to_target((True, False, True))
    with Store(db) as store:
        store.begin_run(run_row("b" * 12, seed_group="0123456789abcdef"))
        store.finish_run("b" * 12, outcome)
    run = get_run(db, "b" * 12)
    assert (run["target_loss"], run["seed_group"]) == (3.0, "0123456789abcdef")
    stored = [{c: r[c] for c in RESULT_COLUMNS} for r in run["results"]]
    assert stored == [{c: getattr(r, c) for c in RESULT_COLUMNS} for r in outcome.repeats]
    assert stored[1]["energy_to_target_j"] is None and stored[1]["best_val_loss"] == 3.1
    curve = read_frame(db, "SELECT * FROM val_curve ORDER BY repeat, step")
    assert len(curve) == 3 * len(CURVE)
    first = curve[curve.repeat == 0]
    assert list(first.step) == [10, 20] and list(first.tokens) == [640, 1280]
    assert list(first.val_loss) == [3.4, 2.9] and list(first.seconds) == [1.0, 2.1]
    assert first.joules.iloc[0] == 50.0 and pd.isna(first.joules.iloc[1])  # unknown, not 0
    assert run["val_curve"][:2] == [
        {"repeat": 0, **CURVE[0].to_dict()}, {"repeat": 0, **CURVE[1].to_dict()},
    ]  # fmt: skip
    # the round trip of a repeat: its results row and its curve rows are the RepeatResult
    rebuilt = [
        replace(r, val_curve=tuple(ValPoint(**{k: v for k, v in p.items() if k != "repeat"})
                                   for p in run["val_curve"] if p["repeat"] == r.repeat))
        for r in outcome.repeats
    ]  # fmt: skip
    assert rebuilt == outcome.repeats
    # stored again: the curves are replaced, not doubled
    with Store(db) as store:
        store.finish_run("b" * 12, to_target((True,)))
    assert len(read_frame(db, "SELECT * FROM val_curve")) == len(CURVE)


def test_list_runs_gives_the_medians_to_target_the_run_line_gives(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    runs = {"c" * 12: (True, False, True), "d" * 12: (True, False), "e" * 12: (False, False)}
    with Store(db) as store:
        for run_id, reached in runs.items():
            store.begin_run(run_row(run_id))
            store.finish_run(run_id, to_target(reached))
        store.begin_run(run_row("f" * 12))  # a window run
        store.finish_run("f" * 12, make_outcome())
    listed = list_runs(db).set_index("run_id")
    for run_id, reached in runs.items():
        expected = target_medians(to_target(reached).repeats)
        row = listed.loc[run_id]
        assert row.n_reached == expected["n_reached"] == sum(reached)
        for figure in ("energy_to_target_j", "energy_to_target_net_j", "seconds_to_target",
                       "tokens_to_target", "best_val_loss"):  # fmt: skip
            got = None if pd.isna(row[f"{figure}_median"]) else row[f"{figure}_median"]
            assert got == pytest.approx(expected[figure]) if expected[figure] else got is None
    assert listed.loc["c" * 12].energy_to_target_j_median == 102.0  # 100, 102, a miss
    assert pd.isna(listed.loc["d" * 12].energy_to_target_j_median)  # half missed: unknown
    assert pd.isna(listed.loc["f" * 12].n_reached)  # a window run has no target


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_export_holds_one_target_loss_column_the_repeat_s(tmp_path: Path, fmt: str) -> None:
    db = tmp_path / "g.duckdb"
    with Store(db) as store:
        store.begin_run(run_row("b" * 12, seed_group="0123456789abcdef"))
        store.finish_run("b" * 12, to_target((True, False)))
        store.begin_run(run_row("c" * 12))
        store.mark_run("c" * 12, "failed", "boom")
    (out,) = export(db, fmt, tmp_path / f"x.{fmt}")
    con = duckdb.connect()
    rows = con.execute(f"SELECT * FROM '{out}' ORDER BY run_id, repeat").df()
    con.close()
    assert list(rows.columns).count("target_loss") == 1
    ours = rows[rows.run_id == "b" * 12]
    assert list(ours.target_loss) == [3.0, 3.0] and list(ours.target_reached) == [True, False]
    assert set(ours.seed_group) == {"0123456789abcdef"}


def test_a_run_stored_before_seed_groups_joins_its_configuration_s_group(
    old_db: Path,
) -> None:
    """The store cannot compute an old run's seed group (which settings make an identity is the
    settings' to say); readers take it from a newer run of the same configuration, and give a
    configuration never run since its config_key."""
    store = Store(old_db)  # migrates
    store.begin_run(run_row("b" * 12, seed_group="0123456789abcdef"))  # the same config_key
    store.finish_run("b" * 12, make_outcome())
    lone = run_row("c" * 12, config={"workload": "x", "settings": {"seed": 1}})
    store.begin_run(lone)
    store.finish_run("c" * 12, make_outcome())
    rows = query_results(old_db).drop_duplicates("run_id").set_index("run_id")
    assert rows.loc["a" * 12, "seed_group"] == "0123456789abcdef"
    assert rows.loc["b" * 12, "seed_group"] == "0123456789abcdef"
    assert rows.loc["c" * 12, "seed_group"] == rows.loc["c" * 12, "config_key"]
    assert get_run(old_db, "a" * 12)["seed_group"] is None  # as stored: unknown
