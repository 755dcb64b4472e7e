"""Model FLOPs and MFU stored under two conventions (`greenbench.vocabulary.flops`): the
migration that adds the causal figures opens an older database, whose runs keep their PaLM
figures and read the causal ones as unknown; new runs store both; every reader reads the
causal MFU against the machine's peak as it reads PaLM's; a database never migrated is read
without them."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest
from click.testing import CliRunner

from greenbench.aggregate import aggregate_repeat
from greenbench.cli import main
from greenbench.energy.base import EnergyWindow
from greenbench.reporting.refs import query_results
from greenbench.results import RankResult, RunOutcome
from greenbench.store import Store, export, get_run, read_frame
from greenbench.store import writer as store_mod
from greenbench.store.views import ok_repeats_sql
from tests.test_store import make_outcome, run_row, version_of


def dashboard():  # type: ignore[no-untyped-def]
    """The dashboard's reader, or the rest of the test skipped where Streamlit is not installed
    (a GPU machine runs the `cuda` tests without it)."""
    pytest.importorskip("streamlit")
    from greenbench.dashboard_app import data

    return data


HARDWARE = {"cpu_model": "Test CPU", "logical_cores": 2}


def outcome(flops: float, flops_causal: float | None, peak: float) -> RunOutcome:
    """One repeat of one rank, 2 s, with these FLOPs, aggregated against ``peak``."""
    rank = RankResult(
        rank=0, local_rank=0, host="h1", repeat=0, tokens=1000, seconds=2.0, compute_s=2.0,
        comm_s=0.0, wait_s=0.0, step_times_s=(1.0, 1.0), peak_mem_bytes=1, flops=flops,
        loss=2.0, n_microbatches=1, energy=EnergyWindow("estimate", False, 2.0, 10.0),
        flops_causal=flops_causal,
    )  # fmt: skip
    repeat = aggregate_repeat(
        [rank], idle_power_w=None, peak_flops=peak, n_devices=1, carbon_g_per_kwh=None
    )
    return RunOutcome(
        status="ok", repeats=[repeat], ranks=[rank], peak_flops=peak,
        peak_flops_source="cpu-gemm-calibration", hardware=HARDWARE,
    )  # fmt: skip


def begin(store: Store, run_id: str) -> None:
    store.begin_run(
        run_row(run_id, nproc=1, strategy="single", layout="dp1", hardware=HARDWARE, host="h1")
    )


def comments(db: Path) -> dict[tuple[str, str], str | None]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT table_name, column_name, comment FROM duckdb_columns() "
            "WHERE table_name IN ('results', 'rank_results')"
        ).fetchall()
    finally:
        con.close()
    return {(t, c): comment for t, c, comment in rows}


@pytest.fixture
def old_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A database as the version before the causal count wrote it: one run, PaLM figures."""
    db = tmp_path / "old.duckdb"
    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "SCHEMA_VERSION", version_of("flops_conventions") - 1)
        store = Store(db)
        begin(store, "a" * 12)
        con = duckdb.connect(str(db))  # as that version's launcher wrote them
        con.execute(
            "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, energy_source, "
            "energy_measured, energy_j, flops, mfu, mfu_note, peak_mem_bytes) VALUES "
            "('aaaaaaaaaaaa', 0, 1000, 2.0, 500.0, 'estimate', false, 10.0, 4e10, 0.2, '', 1)"
        )
        con.close()
        store.mark_run("a" * 12, "ok")
        assert "flops_causal" not in set(read_frame(db, "DESCRIBE results")["column_name"])
    return db


def test_an_old_database_is_read_without_the_causal_figures_before_it_migrates(old_db, tmp_path):
    """Readers never migrate: show, export, REFs and the dashboard read the older file as it
    is, PaLM's figures alone."""
    (r,) = get_run(old_db, "a" * 12)["results"]
    assert r["mfu"] == pytest.approx(0.2) and "mfu_causal" not in r
    (path,) = export(old_db, "csv", tmp_path / "old.csv")
    assert "mfu_causal" not in pd.read_csv(path).columns
    rows = query_results(old_db, "run", "a" * 12)
    assert rows["mfu"].iloc[0] == pytest.approx(0.2) and rows["mfu_causal"].isna().all()
    shown = CliRunner().invoke(main, ["show", "a" * 12, "--db", str(old_db)])
    assert shown.exit_code == 0, shown.output
    assert "MFU (PaLM)" in shown.output and "20.00%" in shown.output
    data = dashboard()
    detail = data.run_results(old_db, "a" * 12)
    assert detail["mfu"].iloc[0] == pytest.approx(0.2) and "mfu_causal" not in detail
    assert "mfu_causal" not in data.repeats(old_db)


def test_the_migration_keeps_old_runs_palm_figures_and_reads_their_causal_ones_unknown(old_db):
    store = Store(old_db)  # migrates
    (old,) = get_run(old_db, "a" * 12)["results"]
    assert (old["flops"], old["mfu"]) == (4e10, 0.2)  # their meaning unchanged: PaLM's
    assert old["flops_causal"] is None and old["mfu_causal"] is None  # unknown, never guessed
    said = comments(old_db)
    assert "PaLM convention" in said["results", "flops"]
    assert "PaLM convention" in said["results", "mfu"]
    assert "PaLM convention" in said["rank_results", "flops"]
    assert "causal convention" in said["results", "flops_causal"]
    assert "causal convention" in said["results", "mfu_causal"]
    assert "causal convention" in said["rank_results", "flops_causal"]

    begin(store, "b" * 12)
    store.finish_run("b" * 12, outcome(4e10, 2.6e10, 1e11))
    (new,) = get_run(old_db, "b" * 12)["results"]
    assert (new["flops"], new["flops_causal"]) == (4e10, 2.6e10)
    assert new["mfu"] == pytest.approx(0.2) and new["mfu_causal"] == pytest.approx(0.13)
    (rank,) = get_run(old_db, "b" * 12)["rank_results"]
    assert (rank["flops"], rank["flops_causal"]) == (4e10, 2.6e10)
    versions = read_frame(old_db, "SELECT max(version) AS v FROM schema_version")
    assert int(versions.v.iloc[0]) == store_mod.SCHEMA_VERSION >= version_of("flops_conventions")


def test_a_new_database_has_the_comments_and_an_unknown_causal_count_stays_unknown(tmp_path):
    db = tmp_path / "new.duckdb"
    store = Store(db)
    assert "PaLM convention" in comments(db)["results", "mfu"]
    begin(store, "c" * 12)
    store.finish_run("c" * 12, outcome(4e10, None, 1e11))  # a user's workload: not counted
    (r,) = get_run(db, "c" * 12)["results"]
    assert r["mfu"] == pytest.approx(0.2) and r["mfu_causal"] is None
    assert r["flops_causal"] is None


def test_the_causal_mfu_is_read_against_the_machine_s_peak_as_palm_s_is(tmp_path):
    """Two runs of one machine, calibrations 1e10 and 4e10: both conventions' MFU of the
    first are read against 4e10, each from its own FLOPs."""
    db = tmp_path / "g.duckdb"
    with Store(db) as store:
        begin(store, "d" * 12)
        store.finish_run("d" * 12, outcome(4e9, 3e9, 1e10))  # 2e9 FLOP/s: 20 % and 15 %
        begin(store, "e" * 12)
        store.finish_run("e" * 12, outcome(8e9, 8e9, 4e10))
    rows = read_frame(db, ok_repeats_sql(["run_id", "mfu", "mfu_causal", "mfu_own_peak"]))
    d = rows.set_index("run_id").loc["d" * 12]
    assert d.mfu_own_peak == pytest.approx(0.2)
    assert d.mfu == pytest.approx(2e9 / 4e10) and d.mfu_causal == pytest.approx(1.5e9 / 4e10)
    (r,) = get_run(db, "d" * 12)["results"]
    assert r["mfu_causal"] == pytest.approx(1.5e9 / 4e10)
    (path,) = export(db, "csv", tmp_path / "out.csv")
    out = pd.read_csv(path).set_index("run_id")
    assert out.loc["d" * 12, "mfu_causal"] == pytest.approx(1.5e9 / 4e10)
    assert out.loc["d" * 12, "flops_causal"] == 3e9
    shown = CliRunner().invoke(main, ["show", "d" * 12, "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "MFU (PaLM)" in text and "MFU (causal)" in text
    assert f"{2e9 / 4e10:.2%}" in text and f"{1.5e9 / 4e10:.2%}" in text
    assert dashboard().run_results(db, "d" * 12)["mfu_causal"].iloc[0] == pytest.approx(
        1.5e9 / 4e10
    )


def test_make_outcome_without_causal_figures_still_stores(tmp_path):
    """Results built before the causal fields (their defaults: unknown) store as before."""
    db = tmp_path / "g.duckdb"
    store = Store(db)
    store.begin_run(run_row("f" * 12))
    store.finish_run("f" * 12, make_outcome())
    results = get_run(db, "f" * 12)["results"]
    assert all(r["flops_causal"] is None and r["mfu_causal"] is None for r in results)
    assert [r["flops"] for r in results] == [3e12, 3e12]
