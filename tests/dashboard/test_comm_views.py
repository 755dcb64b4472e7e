"""The dashboard's Communication tab (greenbench.dashboard_app.comm_views) under AppTest, over
runs written by the real Store: the method × link table against DDP, the methods' energy to a
target over seeds (one never reaching, shown by its best loss), the chart "bytes per step
against energy to target" with the never-reaching method drawn hollow, what the runs say; an
empty state where no such run is stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from comm_helpers import write_db_with_both
from helpers import run_app, texts
from target_helpers import seeds, write_db

from greenbench.dashboard_app import data
from greenbench.dashboard_app.comm_views import EMPTY, MISSED, chart_points
from greenbench.reporting.comm_efficient import read_methods, read_targets, with_bytes


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    data.clear_cache()


@pytest.fixture
def comm_db(tmp_path: Path) -> Path:
    return write_db_with_both(tmp_path / "c.duckdb")


def test_the_tab_tables_each_method_against_ddp_and_says_what_the_runs_show(comm_db, monkeypatch):
    at = run_app(comm_db, monkeypatch, "Communication")
    table = at.dataframe[0].value
    row = table[(table["method"] == "PowerSGD r=4") & (table["link"] == "own transport")].iloc[0]
    assert row["vs DDP"] == "×144 fewer" and row["energy"] == "measured (rapl)"
    shown = texts(at)
    assert "not reached (best 4.2)" in shown
    assert "**faster** than DDP: local SGD H=16" in shown
    assert "cannot tell which spends less energy (the intervals overlap)" in shown
    chart = str(at.get("vega_lite_chart")[0].proto.spec)
    assert "bytes per step and rank (log scale)" in chart and MISSED in chart


def test_a_method_that_did_not_reach_is_drawn_at_its_budget(comm_db):
    points = chart_points(with_bytes(read_targets(comm_db), read_methods(comm_db)))
    diloco = points.set_index("method").loc["DiLoCo H=16"]
    assert diloco["drawn"] == MISSED and diloco["y"] == pytest.approx(620.0)
    assert points.set_index("method").loc["DDP", "y"] == pytest.approx(110.0)


def test_a_database_without_these_runs_shows_how_to_make_them(tmp_path: Path, monkeypatch):
    db = write_db(tmp_path / "o.duckdb", seeds("t", {}, [(True, 1.0, 10.0, 0)]))
    at = run_app(db, monkeypatch, "Communication")
    assert EMPTY in texts(at)
    assert at.dataframe[0].proto.placeholder == "–"
