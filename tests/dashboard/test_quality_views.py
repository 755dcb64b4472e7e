"""The dashboard's Quality tab and the Pareto view's "energy to target" axis
(greenbench.dashboard_app.quality_views) under AppTest, over runs to a target written by the
real Store: the table over seeds (a run that never reached shown by its best loss), the
energy-to-target bars, validation loss against joules and seconds with the target as a rule,
what the runs say; SkipPipe's skipping run ranked on the to-target front; an empty state
where no run trained to a target."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_app, texts
from target_helpers import (
    CURVE,
    FAST,
    SLOW,
    as_rows,
    convergence_runs,
    curve_rows,
    seeds,
    write_db,
)

from greenbench.dashboard_app import data
from greenbench.dashboard_app.quality_views import EMPTY, curve_lines, labelled
from greenbench.reporting.to_target import seed_rows, target_board


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    data.clear_cache()


@pytest.fixture
def target_db(tmp_path: Path) -> Path:
    return write_db(tmp_path / "t.duckdb", convergence_runs())


def specs(at) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(c.proto.spec) for c in at.get("vega_lite_chart")]


def test_the_quality_tab_tables_every_configuration_over_its_seeds(target_db, monkeypatch):
    at = run_app(target_db, monkeypatch, "Quality")
    table = at.dataframe[0].value.set_index("configuration")
    assert len(table) == 8
    mamba2 = table.loc["mamba2/tiny seq=128 fixed single×1"]
    assert mamba2["reached"] == "0/2 seeds"
    assert mamba2["energy to target (J)"] == "not reached (best 4.12)"
    fast = table.loc["transformer/tiny seq=128 fixed single×1"]
    assert fast["energy to target (J)"] == "110 [100–120]"
    assert fast["time to target (s)"] == "11 [10–12]"
    skipping = table.loc["transformer/tiny seq=128 fixed skippipe[skippipe 1-2-1 skip=0.5]×4"]
    assert skipping["trust"].startswith("partial model")
    assert "min–max range of the seeds" in texts(at)


def test_the_quality_tab_draws_bars_and_validation_curves_with_the_target(target_db, monkeypatch):
    at = run_app(target_db, monkeypatch, "Quality")
    charts = specs(at)
    bars = next(c for c in charts if '"bar"' in c)
    assert "energy to target (J)" in bars and "interval over seeds" in bars
    curves = [c for c in charts if "val_loss" in c]
    assert len(curves) == 2
    assert any("training energy (J)" in c for c in curves)
    assert any("training time (s)" in c for c in curves)
    assert all("target_loss" in c and '"rule"' in c for c in curves)
    assert "mamba2/tiny seq=128 fixed single×1 (not reached (best 4.12))" in texts(at)
    at.radio(key="quality_bars").set_value("seconds_to_target").run()
    assert not at.exception
    assert any("time to target (s)" in c for c in specs(at) if '"bar"' in c)


def test_the_quality_tab_says_what_the_runs_show(target_db, monkeypatch):
    shown = texts(run_app(target_db, monkeypatch, "Quality"))
    assert "**transformer** reaches the target first" in shown
    assert "**less time and less energy**" in shown
    assert "ddp / fsdp / odc" in shown and "within rounding" in shown


def test_an_estimate_is_marked_in_the_quality_table(tmp_path, monkeypatch):
    never = [(False, 60.0, 600.0, 4.123), (False, 60.0, 600.0, 4.3)]
    runs = [
        *seeds("t", {}, FAST, source="estimate", measured=False),
        *seeds("m", {"model.family": "mamba"}, never, source="estimate", measured=False),
    ]
    at = run_app(write_db(tmp_path / "e.duckdb", runs), monkeypatch, "Quality")
    table = at.dataframe[0].value.set_index("configuration")
    assert set(table["energy"]) == {"≈ estimate"}
    energy = table["energy to target (J)"]
    assert energy["transformer/tiny seq=128 fixed single×1"] == "≈ 110 [100–120] (est.)"
    # how close a run came is a loss, not an energy figure: never marked as an estimate
    assert energy["mamba/tiny seq=128 fixed single×1"] == "not reached (best 4.12)"
    assert "time × modelled power" in texts(at)


def test_the_sidebar_filters_apply(target_db, monkeypatch):
    at = run_app(target_db, monkeypatch, "Quality")
    at.sidebar.multiselect(key="f_strategy").set_value(["ddp"]).run()
    assert not at.exception
    assert list(at.dataframe[0].value["configuration"]) == ["transformer/tiny seq=128 fixed ddp×2"]


def test_the_quality_tab_without_runs_to_a_target(dashboard_db, monkeypatch):
    at = run_app(dashboard_db, monkeypatch, "Quality")
    assert EMPTY in texts(at)
    assert len(at.dataframe) == 1 and at.dataframe[0].value.empty


def test_the_pareto_view_ranks_skipping_runs_on_energy_to_target(target_db, monkeypatch):
    at = run_app(target_db, monkeypatch, "Pareto")
    at.radio(key="p_axis").set_value("energy to target").run()
    assert not at.exception
    front = set(at.dataframe[0].value["configuration"])
    assert "transformer/tiny seq=128 fixed skippipe[skippipe 1-2-1 skip=0.5]×4" in front
    shown = texts(at)
    assert "**Non-dominated configurations to target**" in shown
    assert "partial-model point(s) (SkipPipe skipping stages) are ranked on this front" in shown
    assert "Not ranked, their median seed did not reach the target: mamba2" in shown
    at.selectbox(key="p_target_y").set_value("energy_to_target_net_j").run()
    assert not at.exception
    assert "net energy to target (J)" in at.dataframe[0].value.columns


def test_the_pareto_view_on_j_per_token_is_unchanged(target_db, monkeypatch):
    at = run_app(target_db, monkeypatch, "Pareto")
    assert at.radio(key="p_axis").value == "J/token"
    assert "**Non-dominated configurations**" in texts(at)


def test_energy_to_target_without_runs_to_a_target(dashboard_db, monkeypatch):
    at = run_app(dashboard_db, monkeypatch, "Pareto")
    at.radio(key="p_axis").set_value("energy to target").run()
    assert not at.exception
    assert EMPTY in texts(at)


def test_configurations_sharing_a_name_get_their_own_lines(tmp_path, monkeypatch):
    runs = [
        *seeds("a", {}, FAST, curve=CURVE),
        *seeds("b", {"target.gap_closed": 0.3}, SLOW, curve=CURVE, target=5.5),
    ]
    at = run_app(write_db(tmp_path / "n.duckdb", runs), monkeypatch, "Quality")
    names = list(at.dataframe[0].value["configuration"])
    assert names == [
        "transformer/tiny seq=128 fixed single×1 · target 4",
        "transformer/tiny seq=128 fixed single×1 · target 5.5",
    ]
    assert at.multiselect(key="quality_curves").value == names
    pooled = seed_rows(as_rows(runs))
    lines = curve_lines(curve_rows(runs), pooled, labelled(target_board(pooled)))
    by_run = lines.groupby("run_id")["config_name"].first()
    assert by_run["a0"] == by_run["a1"] == names[0] and by_run["b0"] == names[1]
