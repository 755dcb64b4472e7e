"""The dashboard app under streamlit.testing's AppTest, against a seeded database.

Every tab renders without an exception, the sidebar filters change what the leaderboard holds,
estimated energy is marked, empty and missing databases get an empty state, a writer can write
while the app has read, and a writer holding the file produces a message instead of a crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pytest
from helpers import run_app, texts
from streamlit.testing.v1 import AppTest

from greenbench.dashboard_app import data
from greenbench.dashboard_app.app import TABS

SHIM = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
ALL_CONFIGS = 9  # seeded: 4 transformer-vs-mamba on CPU, 1 on GPU, 4 data-parallel


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    data.clear_cache()


def board(at: AppTest) -> pd.DataFrame:
    return at.dataframe[0].value


def display_values(at: AppTest, i: int = 0) -> pd.DataFrame:
    """What the browser shows in dataframe ``i`` (the Styler's formatted strings)."""
    raw = at.dataframe[i].proto.arrow_data.styler.display_values
    return pa.ipc.open_stream(raw).read_pandas()


@pytest.mark.parametrize("view", TABS)
def test_every_tab_renders(dashboard_db: Path, monkeypatch: pytest.MonkeyPatch, view: str) -> None:
    at = run_app(dashboard_db, monkeypatch, view)
    assert at.tabs[TABS.index(view)].label == view
    assert len(at.dataframe) >= 1


def test_shim_runs_the_same_app(dashboard_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = run_app(dashboard_db, monkeypatch, script=SHIM)
    assert len(board(at)) == ALL_CONFIGS


def test_leaderboard_has_one_row_per_configuration(
    dashboard_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    df = board(run_app(dashboard_db, monkeypatch))
    assert len(df) == ALL_CONFIGS
    assert "transformer/tiny seq=9999 fixed ddp×2" not in set(df["configuration"])  # failed run
    assert set(df["repeats"]) == {3}  # newest sha only
    assert df["J/token"].is_monotonic_increasing


def test_estimated_energy_is_marked(dashboard_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = run_app(dashboard_db, monkeypatch)
    df, shown = board(at), display_values(at)
    est = df["energy"] == "≈ estimate"
    assert est.sum() == 4 and (df.loc[~est, "energy"].str.startswith("measured")).all()
    assert shown.loc[est, "J/token"].str.match(r"^≈ .* \(est\.\)$").all()
    assert shown.loc[est, "CO2 g/M tok"].str.contains("est.").all()
    assert not shown.loc[~est, "J/token"].str.contains("≈").any()
    assert "estimated energy" in texts(at)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("f_workload", ["data-parallel"], 4),
        ("f_hardware", ["NVIDIA H100 80GB HBM3"], 1),
        ("f_strategy", ["fsdp"], 2),
        ("f_model", ["mamba/tiny"], 2),
        ("f_suite", ["smoke"], ALL_CONFIGS),
    ],
)
def test_sidebar_filters(
    dashboard_db: Path, monkeypatch: pytest.MonkeyPatch, key: str, value: list[str], expected: int
) -> None:
    at = run_app(dashboard_db, monkeypatch)
    at.sidebar.multiselect(key=key).set_value(value).run()
    assert not at.exception
    assert len(board(at)) == expected


def test_measured_only_and_scope(dashboard_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = run_app(dashboard_db, monkeypatch)
    at.sidebar.checkbox(key="f_measured").check().run()
    df = board(at)
    assert len(df) == 5 and not df["energy"].str.contains("estimate").any()
    at.sidebar.checkbox(key="f_measured").uncheck()
    at.sidebar.radio(key="f_scope").set_value("all").run()
    assert sorted(board(at)["repeats"].tolist()) == [3] * 5 + [6] * 4  # two shas pooled


def test_filters_can_empty_the_board(dashboard_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = run_app(dashboard_db, monkeypatch)
    at.sidebar.multiselect(key="f_workload").set_value(["data-parallel"])
    at.sidebar.multiselect(key="f_model").set_value(["mamba/tiny"]).run()
    assert "No configuration matches the filters." in texts(at)
    for view in TABS[1:]:
        at.query_params["view"] = view
        at.session_state["view"] = view
        at.run()
        assert not at.exception


def test_pareto_front_and_opening_a_configuration(
    dashboard_db: Path, monkeypatch: pytest.MonkeyPatch, seeded: Any
) -> None:
    at = run_app(dashboard_db, monkeypatch, "Pareto")
    # measured front: three CPU data-parallel configurations and the GPU one; estimated front:
    # mamba seq=256 alone (it is faster and leaner than every other estimate)
    assert "**Non-dominated configurations** (5 of 9)" in texts(at)
    front = set(board(at)["configuration"])
    assert {
        "mamba/tiny seq=256 fixed single×1",
        "transformer/tiny seq=2048 fixed single×1",
    } <= front
    assert "transformer/tiny seq=1024 fixed single×1" not in front
    assert "each has its own front" in texts(at)
    assert "### transformer/tiny seq=2048" not in texts(at)
    at.selectbox(key="p_open").set_value(seeded.gpu_row_id).run()
    assert not at.exception
    assert "### transformer/tiny seq=2048 fixed single×1" in texts(at)


def test_pareto_axes_colour_and_size(dashboard_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = run_app(dashboard_db, monkeypatch, "Pareto")
    at.selectbox(key="p_x").set_value("mfu")
    at.selectbox(key="p_y").set_value("peak_mem_bytes")
    at.selectbox(key="p_color").set_value("strategy")
    at.selectbox(key="p_size").set_value("co2_g_per_mtok").run()
    assert not at.exception
    # no energy axis: one front per workload, measured and estimated energy on the same one
    assert "measured and estimated energy, are not comparable" not in texts(at)
    assert "Workloads are not comparable" in texts(at)
    at.selectbox(key="p_y").set_value("mfu").run()
    assert "Choose two different metrics." in texts(at)


def test_run_detail_of_a_measured_multi_rank_run(
    dashboard_db: Path, monkeypatch: pytest.MonkeyPatch, seeded: Any
) -> None:
    at = run_app(dashboard_db, monkeypatch, "Run detail")
    at.selectbox(key="detail_config").set_value(seeded.ddp_row_id).run()
    assert not at.exception
    shown = texts(at)
    assert "### transformer/tiny seq=512 longalign ddp×2" in shown
    assert "No power time series" not in shown  # rapl run with samples
    env = at.dataframe[0].value.set_index("item")["value"]
    assert env["git sha"] == "bbbb2222" and env["hardware: cpu model"] == "AMD EPYC 7B13"
    assert env["version: torch"] == "2.13.0+cpu"
    assert len(at.dataframe[1].value) == 3  # every repeat
    ranks = at.dataframe[2].value
    assert ranks["rank"].tolist() == [0, 1]
    assert ranks["wait (s)"].iloc[1] > ranks["wait (s)"].iloc[0]
    at.selectbox(key="detail_repeat").set_value(2).run()
    assert not at.exception


def test_run_detail_of_an_estimated_run(
    dashboard_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = run_app(dashboard_db, monkeypatch, "Run detail")
    shown = texts(at)
    assert "No power time series was sampled" in shown
    assert "estimated energy" in shown
    repeats = display_values(at, 1)
    assert repeats["J/token"].str.startswith("≈").all()
    runs = at.selectbox(key="detail_run")
    assert len(runs.options) == 2  # both shas of this configuration
    runs.set_value(runs.options[1].split(" · ")[0]).run()
    assert not at.exception


def test_history_across_two_shas(
    dashboard_db: Path, monkeypatch: pytest.MonkeyPatch, seeded: Any
) -> None:
    at = run_app(dashboard_db, monkeypatch, "History")
    hist = at.dataframe[0].value
    assert hist["git sha"].tolist() == ["aaaa1111", "bbbb2222"]
    at.selectbox(key="history_config").set_value(seeded.gpu_row_id).run()
    assert "Only one git sha so far" in texts(at)


def test_history_per_branch_and_filtered_to_one(
    branches_db: Path, monkeypatch: pytest.MonkeyPatch, seeded: Any
) -> None:
    at = run_app(branches_db, monkeypatch, "History")
    box = at.selectbox(key="history_config")
    box.set_value(next(o for o in box.options if seeded.two_branch_config in o)).run()
    assert at.radio(key="history_by").value == "commit"  # every run has a sha
    by_commit = at.dataframe[0].value
    assert by_commit["git sha"].tolist() == [sha for sha, _ in seeded.branches]
    assert by_commit["branch"].tolist() == [branch for _, branch in seeded.branches]
    at.radio(key="history_by").set_value("branch").run()
    by_branch = at.dataframe[0].value
    assert by_branch.columns[0] == "branch"
    assert by_branch["branch"].tolist() == ["main", "feature/energy"]  # first-run order
    assert by_branch["runs"].tolist() == [1, 1]
    at.selectbox(key="history_branch").set_value("main").run()
    assert at.dataframe[0].value["branch"].tolist() == ["main"]
    assert "Only one branch so far" in texts(at)
    at.selectbox(key="history_branch").set_value("(any)").run()
    at.radio(key="history_by").set_value("date").run()
    assert at.dataframe[0].value["day"].tolist() == ["2026-01-05", "2026-01-09"]
    assert not at.exception


def test_comparisons_show_empty_states_for_workloads_without_runs(
    dashboard_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = run_app(dashboard_db, monkeypatch, "Comparisons")
    infos = [i.value for i in at.info]
    for workload in ("fsdp-vs-odc", "hybrid", "skippipe"):
        assert any(
            f"--workload {workload}" in i and "No runs of this workload yet" in i for i in infos
        )
    assert not any("transformer-vs-mamba" in i or "data-parallel" in i for i in infos)
    assert len(at.dataframe) == 2  # the two workloads with data


def test_missing_database_shows_how_to_create_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "nothing.duckdb"
    at = run_app(db, monkeypatch)
    assert "No results database" in texts(at)
    assert at.code[0].value == f"greenbench run --suite smoke --db {db}"
    assert not db.exists()  # the dashboard never creates the file


def test_database_without_successful_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seeded: Any
) -> None:
    db = tmp_path / "empty.duckdb"
    con = duckdb.connect(str(db))
    con.execute(seeded.schema.read_text())
    con.close()
    assert "holds no successful run yet" in texts(run_app(db, monkeypatch))
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    assert "without greenbench's tables" in texts(run_app(other, monkeypatch))


def test_a_writer_succeeds_while_the_dashboard_is_open(
    dashboard_db: Path, monkeypatch: pytest.MonkeyPatch, seeded: Any
) -> None:
    at = run_app(dashboard_db, monkeypatch)
    assert seeded.new_config not in set(board(at)["configuration"])
    done = seeded.write_run(dashboard_db)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "written"
    at.sidebar.button(key="reload").click().run()
    assert seeded.new_config in set(board(at)["configuration"])


def test_a_held_write_lock_gives_a_message_not_a_crash(
    dashboard_db: Path, monkeypatch: pytest.MonkeyPatch, seeded: Any
) -> None:
    monkeypatch.setattr(data, "READ_RETRIES", 3)
    monkeypatch.setattr(data, "READ_BACKOFF_S", 0.01)
    holder = seeded.hold_lock(dashboard_db)
    try:
        at = run_app(dashboard_db, monkeypatch)
        assert "is busy" in texts(at)
        assert "Retried for" in texts(at)
        assert not at.dataframe
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    at.button(key="retry_busy").click().run()
    assert not at.exception
    assert len(board(at)) == ALL_CONFIGS


def test_db_path_resolution() -> None:
    env = {"GREENBENCH_DB": "/env.duckdb"}
    assert data.resolve_db_path(["app.py", "--db", "/arg.duckdb"], env) == Path("/arg.duckdb")
    assert data.resolve_db_path(["app.py"], env) == Path("/env.duckdb")
    assert data.resolve_db_path(["app.py", "--db"], {}) == Path("greenbench.duckdb")


def test_a_file_that_is_not_a_database_shows_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "notes.duckdb"
    db.write_text("not a database\n")
    at = run_app(db, monkeypatch)
    assert "is not a DuckDB database" in "\n".join(e.value for e in at.error)
    assert "busy" not in texts(at)


@pytest.mark.parametrize("view", TABS)
def test_a_database_written_by_the_real_store(
    seeded_db: Path, monkeypatch: pytest.MonkeyPatch, view: str
) -> None:
    """The shared fixture goes through Store and metrics.aggregate_repeat: the app must read
    what the real writer writes, not only what our own seed inserts."""
    con = duckdb.connect(str(seeded_db), read_only=True)
    try:
        (n_configs,) = con.execute(
            "SELECT count(DISTINCT (config_key, res.energy_source)) FROM runs"
            " JOIN results res USING (run_id) WHERE status = 'ok'"
        ).fetchone()
    finally:
        con.close()
    at = run_app(seeded_db, monkeypatch, view)
    if view == "Leaderboard":
        df = board(at)
        assert len(df) == n_configs
        assert set(df["energy"]) == {"≈ estimate", "measured (rapl)"}
    if view == "Run detail":
        rapl = next(o for o in at.selectbox(key="detail_config").options if "rapl" in o)
        at.selectbox(key="detail_config").select_index(
            at.selectbox(key="detail_config").options.index(rapl)
        ).run()
        assert not at.exception
        assert rapl in texts(at)  # the detail's caption names the configuration opened
        assert "No power time series" not in texts(at)


# --- the trust model: contended runs marked (and hideable), unknown net energy, intervals ------

BUSY_CONFIG = "mamba/tiny seq=256 fixed single×1"  # newest sha's run of it is stored contended
IDLE_CONFIG = "transformer/tiny seq=512 longalign ddp×2"  # its idle baseline was unreliable


@pytest.fixture
def trust_db(dashboard_db: Path) -> Path:
    """The seeded database with the trust model's columns (as a migrated one holds them): one
    configuration's newest run contended, one with an unreliable idle baseline (net energy
    unknown), and rank 1 of that run reading no meter (its window 0 J, read by local rank 0)."""
    con = duckdb.connect(str(dashboard_db))
    con.execute("ALTER TABLE runs ADD COLUMN contended BOOLEAN")
    con.execute("ALTER TABLE runs ADD COLUMN others_busy_cores DOUBLE")
    con.execute("ALTER TABLE runs ADD COLUMN other_greenbench INTEGER")
    con.execute("ALTER TABLE results ADD COLUMN idle_note VARCHAR")
    con.execute("UPDATE runs SET contended = false, others_busy_cores = 0.02, other_greenbench = 0")
    con.execute(
        "UPDATE runs SET contended = true, others_busy_cores = 1.4, other_greenbench = 2 "
        "WHERE config_name = ? AND git_sha = 'bbbb2222'",
        [BUSY_CONFIG],
    )
    con.execute("UPDATE results SET idle_note = ''")
    con.execute(
        "UPDATE results SET energy_net_j = NULL, net_joules_per_token = NULL, idle_note = "
        "'idle baseline unreliable: idle power sampled while other processes kept 1.10 cores "
        "busy' WHERE run_id IN (SELECT run_id FROM runs WHERE config_name = ?)",
        [IDLE_CONFIG],
    )
    con.execute(
        "UPDATE rank_results SET energy_j = 0.0, energy_note = 'CPU/DRAM energy read by local "
        "rank 0' WHERE rank = 1"
    )
    con.close()
    return dashboard_db


def test_contended_configurations_are_marked_and_can_be_hidden(
    trust_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = run_app(trust_db, monkeypatch)
    df = board(at).set_index("configuration")
    assert df.loc[BUSY_CONFIG, "trust"].startswith("⚠ contended")
    assert "contended" not in df.loc["mamba/tiny seq=1024 fixed single×1", "trust"]
    assert "net unknown: idle unreliable" in df.loc[IDLE_CONFIG, "trust"]
    assert pd.isna(df.loc[IDLE_CONFIG, "J/token net"])  # unknown, never a number
    assert "⚠ contended" in texts(at)  # the caption says what the marker means
    at.sidebar.checkbox(key="f_contended").check().run()
    assert not at.exception
    # without its contended run, the configuration shows its older, uncontended one
    hidden = board(at).set_index("configuration")
    assert len(hidden) == ALL_CONFIGS and hidden.loc[BUSY_CONFIG, "git sha"] == "aaaa1111"
    assert "contended" not in hidden.loc[BUSY_CONFIG, "trust"]
    assert not hidden["trust"].str.contains("contended").any()


def test_intervals_are_named_for_what_they_are(
    trust_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = run_app(trust_db, monkeypatch)
    df = board(at)
    assert "J/token CI" not in df.columns and set(df["interval"]) == {"min–max range"}
    assert "min–max of 3" in set(df["trust"].str.split(" · ").explode())
    assert "not a CI" in texts(at)  # three repeats: the caption says it is no 95 % interval


def test_pareto_and_history_mark_a_contended_run(
    trust_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = run_app(trust_db, monkeypatch, "Pareto")
    front = board(at).set_index("configuration")
    assert front.loc[BUSY_CONFIG, "trust"].startswith("⚠ contended")  # on the estimates' front
    assert "ringed in red" in texts(at)
    at = run_app(trust_db, monkeypatch, "History")
    rows = {o: o for o in at.selectbox(key="history_config").options}
    busy = next(o for o in rows if BUSY_CONFIG in o)
    at.selectbox(key="history_config").set_value(busy).run()
    hist = at.dataframe[0].value.set_index("git sha")
    assert hist.loc["bbbb2222", "trust"].startswith("⚠ contended")
    assert "contended" not in hist.loc["aaaa1111", "trust"]


def test_run_detail_says_how_far_to_trust_the_run(
    trust_db: Path, monkeypatch: pytest.MonkeyPatch, seeded: Any
) -> None:
    at = run_app(trust_db, monkeypatch, "Run detail")
    options = at.selectbox(key="detail_config").options
    at.selectbox(key="detail_config").select_index(
        next(i for i, o in enumerate(options) if BUSY_CONFIG in o)
    ).run()
    shown = texts(at)
    assert "other processes kept 1.40 cores busy; 2 other greenbench processes" in shown
    at.selectbox(key="detail_config").select_index(
        next(i for i, o in enumerate(options) if IDLE_CONFIG in o)
    ).run()
    shown = texts(at)
    assert "net energy unknown: idle baseline unreliable" in shown
    ranks = display_values(at, 2)
    # rank 1 reads no meter (its node's CPU is read by local rank 0): empty, never "≈ 0 (est.)"
    assert (
        ranks.loc[1, "energy (J)"] == "–" and "read by local rank 0" in ranks.loc[1, "energy note"]
    )
    repeats = at.dataframe[1].value
    assert repeats["net energy (J)"].isna().all()
    assert not (pd.to_numeric(repeats["J/token net"], errors="coerce") < 0).any()
