"""Every kind of figure the trust model tells apart, under AppTest: simulated and emulated runs
and a user's own measurements are off the leaderboard and the Pareto front, shown apart and
labelled, and openable in Run detail and History; no Python ``None`` or raw column name reaches
the page; the Pareto legend lists only the kinds present; the power-limit table is rounded and
in percent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import run_app, texts
from streamlit.testing.v1 import AppTest

from greenbench.dashboard_app import apart_views, data
from greenbench.dashboard_app.app import TABS


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    data.clear_cache()


def shown_frames(at: AppTest) -> list[pd.DataFrame]:
    """Every dataframe as the browser shows it (the Styler's strings where styled)."""
    import pyarrow as pa

    out = []
    for frame in at.dataframe:
        raw = frame.proto.arrow_data.styler.display_values
        out.append(pa.ipc.open_stream(raw).read_pandas() if raw else frame.value)
    return out


def open_config(at: AppTest, key: str, needle: str) -> str:
    box = at.selectbox(key=key)
    index = next(i for i, o in enumerate(box.options) if needle in o)
    box.select_index(index).run()
    assert not at.exception, [e.value for e in at.exception]
    return box.options[index]


def test_simulated_runs_are_apart_labelled_and_openable(
    kinds_db: Path, monkeypatch: pytest.MonkeyPatch, seeded_kinds: Any
) -> None:
    at = run_app(kinds_db, monkeypatch)
    board = at.dataframe[0].value
    assert not board["energy"].str.contains("simulated|emulated").any()
    assert not set(seeded_kinds.simulated) & set(board["configuration"])
    at = run_app(kinds_db, monkeypatch, "Comparisons")
    shown = texts(at)
    assert (
        "No runs of this workload yet. Create them with `greenbench run --workload skippipe`"
        not in shown
    )
    assert "Simulated, not measured (2)" in shown and "**Simulated, not measured.**" in shown
    sims = at.dataframe[-1].value
    assert set(sims["configuration"]) == set(seeded_kinds.simulated)
    assert set(sims["energy"]) == {"simulated (model)"}
    assert "J/token (model)" in sims.columns
    at = run_app(kinds_db, monkeypatch, "Run detail")
    label = open_config(at, "detail_config", seeded_kinds.simulated[0])
    assert label.startswith("[simulated] ") and "simulated (model)" in label
    assert "**Simulated, not measured.**" in texts(at)
    assert f"### {seeded_kinds.simulated[0]}" in texts(at)
    at = run_app(kinds_db, monkeypatch, "History")
    open_config(at, "history_config", seeded_kinds.simulated[1])
    assert "**Simulated, not measured.**" in texts(at)
    assert at.dataframe[0].value["energy"].tolist() == ["simulated (model)"]


def test_own_measurements_are_off_the_leaderboard_in_a_tab_of_their_own(
    kinds_db: Path, monkeypatch: pytest.MonkeyPatch, seeded_kinds: Any
) -> None:
    at = run_app(kinds_db, monkeypatch)
    assert "sleepy" not in set(at.dataframe[0].value["configuration"])
    at = run_app(kinds_db, monkeypatch, "Pareto")
    assert not any("sleepy" in str(o) for o in at.selectbox(key="p_open").options)
    assert all(b"sleepy" not in d.data.data for d in at.get("vega_lite_chart")[0].proto.datasets)
    at = run_app(kinds_db, monkeypatch, "Own measurements")
    own = at.dataframe[0].value
    assert own["name"].tolist() == ["sleepy"] and own["what"].tolist() == ["whole process"]
    assert own["energy (J)"].iloc[0] == pytest.approx(12.0 * 2.1)
    assert pd.isna(own["J/token"].iloc[0])  # a whole process has no tokens: unknown, not 0
    assert "not a training window" in texts(at)
    at = run_app(kinds_db, monkeypatch, "Run detail")
    label = open_config(at, "detail_config", "sleepy")
    assert label.startswith("[own measurement] ")


def test_no_none_or_raw_column_names_reach_the_page(
    kinds_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = run_app(kinds_db, monkeypatch, "Run detail")
    open_config(at, "detail_config", "sleepy")  # no git sha, no suite, no label, no loss
    run = at.selectbox(key="detail_run").options[0]
    assert "None" not in run and "sha unknown" in run
    page = texts(at)
    frames = shown_frames(at)
    for frame in frames:
        cells = frame.astype(str).to_numpy().ravel().tolist()
        assert not {"None", "nan", "NaN", "<NA>"} & set(cells), frame
        assert not [c for c in frame.columns if "_" in str(c)], frame.columns  # human headings
        page += " ".join(cells)
    assert "None" not in page
    env = frames[0].set_index("item")["value"]
    assert env["hardware: memory"] == "8.0 GiB" and env["hardware: gpus"] == "none"
    assert env["hardware: gpu driver"] == "–" and env["git sha"] == "unknown"
    repeats = frames[1]
    assert {"tokens/s", "peak mem (MiB)", "energy (J)", "J/token"} <= set(repeats.columns)
    assert float(repeats["peak mem (MiB)"].iloc[0]) == pytest.approx(5e7 / 2**20, rel=1e-3)


def test_pareto_legend_lists_only_the_kinds_present_and_dominated_points_are_legible(
    kinds_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = run_app(kinds_db, monkeypatch, "Pareto")
    at.sidebar.multiselect(key="f_workload").set_value(["data-parallel"]).run()  # estimates only
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    scatter = spec["layer"][1]["encoding"]
    assert scatter["shape"]["scale"]["domain"] == ["≈ estimate"]
    dominated = scatter["opacity"]["value"], scatter["size"]["value"]
    assert dominated[0] >= 0.7 and dominated[1] >= 90


def test_modelled_board_pools_simulated_and_emulated_runs_only(kinds_db: Path) -> None:
    rows = data.repeats(kinds_db)
    modelled = apart_views.modelled_board(rows, "latest")
    kinds = {apart_views.kind_tag(r) for _, r in modelled.iterrows()}
    assert kinds == {"simulated", "emulated"}
    assert len(apart_views.own_board(rows, "latest")) == 1


@pytest.mark.parametrize("view", TABS)
def test_every_table_writes_a_missing_value_as_a_dash(
    kinds_db: Path, monkeypatch: pytest.MonkeyPatch, view: str
) -> None:
    """A missing number (the contended run's MFU, a whole process's J/token) is drawn by the
    browser's grid, which writes "None" unless the table names a placeholder."""
    at = run_app(kinds_db, monkeypatch, view)
    assert at.dataframe
    for frame in at.dataframe:
        assert frame.proto.placeholder == "–"


def test_a_partial_model_run_is_on_no_leaderboard_and_no_front(
    kinds_db: Path, monkeypatch: pytest.MonkeyPatch, seeded_kinds: Any
) -> None:
    """The measured SkipPipe run skipping half its stages is faster and leaner than every
    measured run, yet trains half the model per token: it is ranked only within its own
    question (the report's SkipPipe section), never on the leaderboard or a front."""
    at = run_app(kinds_db, monkeypatch)
    board = at.dataframe[0].value.set_index("configuration")
    assert seeded_kinds.partial not in board.index
    assert "transformer/tiny seq=256 fixed single×1" in board.index
    at = run_app(kinds_db, monkeypatch, "Pareto")
    front = set(at.dataframe[0].value["configuration"])
    assert seeded_kinds.partial not in front
    assert "transformer/tiny seq=256 fixed single×1" in front  # the measured rapl run
    assert "partial-model point(s)" not in texts(at)
    # ranked within its own question: the SkipPipe comparison shows it with its useful tokens/s
    at = run_app(kinds_db, monkeypatch, "Comparisons")
    skippipe = next(
        f.value for f in at.dataframe
        if "useful tokens/s" in f.value.columns
    )  # fmt: skip
    (row,) = skippipe[skippipe["configuration"] == seeded_kinds.partial].to_dict("records")
    assert row["visited share"] < 1
    assert row["useful tokens/s"] == pytest.approx(row["tokens/s"] * row["visited share"])
    assert "useful tokens/s (tokens/s × its visited share)" in texts(at)
