"""The dashboard's small parts: the serve command line, estimate marking, chart specs."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pandas as pd

from greenbench.dashboard_app import charts, marking
from greenbench.dashboard_app import serve as dashboard


def test_command_is_headless_private_and_passes_the_database() -> None:
    cmd = dashboard.build_command(Path("/data/r.duckdb"), 8765)
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"]
    assert Path(cmd[4]) == dashboard.APP and dashboard.APP.is_file()
    flags = dict(zip(cmd[5 : cmd.index("--") : 2], cmd[6 : cmd.index("--") : 2], strict=True))
    assert flags["--server.port"] == "8765"
    assert flags["--server.address"] == "127.0.0.1"
    assert flags["--server.headless"] == "true"
    assert flags["--browser.gatherUsageStats"] == "false"
    assert cmd[cmd.index("--") :] == ["--", "--db", "/data/r.duckdb"]
    shown = dashboard.build_command(Path("x"), 1, headless=False, address="0.0.0.0")
    assert "false" == shown[shown.index("--server.headless") + 1]
    assert "0.0.0.0" == shown[shown.index("--server.address") + 1]


def test_free_port_is_bindable() -> None:
    port = dashboard.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


def test_marking_formats_estimates_only() -> None:
    table = pd.DataFrame({"name": ["a", "b"], "J/token": [0.5, 0.25], "tokens/s": [1234.5, 9.0]})
    styler = marking.style_marked(table, pd.Series([True, False]), ("J/token",))
    shown = styler.to_html()
    assert "≈ 0.25 (est.)" in shown and "≈ 0.5" not in shown
    assert "1,234" in shown and "≈ 9" not in shown  # not an energy column: never marked
    assert marking.mark("≈ estimate", False) == "≈ estimate"  # already marked stays as is
    assert marking.mark("–", False) == "–"


def test_number_format() -> None:
    assert marking.fmt(float("nan")) == "–"
    assert marking.fmt(None) == "–"
    assert marking.fmt(123456.7) == "123,457"
    assert marking.fmt(12.345) == "12.3"
    assert marking.fmt(0.0123456) == "0.01235"
    assert marking.fmt_ci(1.0, 2.0) == "1 – 2"


def test_step_line_runs_through_dominated_corners() -> None:
    # larger x better: from a to b go up first (a.x, b.y); smaller x better: across first
    assert charts.step_interpolation("max") == "step-before"
    assert charts.step_interpolation("min") == "step-after"


def test_pareto_chart_spec_has_front_line_selection_and_estimate_marks() -> None:
    points = pd.DataFrame(
        {
            "tokens_per_s": [100.0, 200.0, 150.0],
            "joules_per_token": [1.0, 2.0, 3.0],
            "on_front": [True, True, False],
            "energy_kind": ["measured", "measured", "≈ estimate"],
            "energy": ["measured (rapl)", "measured (rapl)", "≈ estimate"],
            "front_group": ["measured", "measured", "≈ estimate"],
            "row_id": ["a", "b", "c"],
            "config_name": ["A", "B", "C"],
            "workload": ["w"] * 3,
            "device_type": ["cpu"] * 3,
            "n_repeats": [3] * 3,
        }
    )
    spec = charts.pareto_chart(points, "tokens_per_s", "joules_per_token", "max").to_dict()
    line, scatter = spec["layer"]
    assert line["mark"]["type"] == "line" and line["mark"]["interpolate"] == "step-before"
    front_rows = spec["datasets"][line["data"]["name"]]
    assert [r["row_id"] for r in front_rows] == ["a", "b"]
    assert [p["name"] for p in spec["params"]] == [charts.SELECTION]
    assert scatter["encoding"]["shape"]["scale"]["range"] == ["circle", "triangle-up"]
    assert "≈ incl. estimates" in scatter["encoding"]["y"]["title"]
    assert "higher is better" in scatter["encoding"]["x"]["title"]
