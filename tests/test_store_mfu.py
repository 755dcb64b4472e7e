"""MFU read against one peak per machine and thread count (greenbench.store.views): two runs of
one configuration whose CPU calibrations came out 1.04e10 and 4.21e10 FLOP/s stored MFU 17.9 %
and 6.1 %; every reader (the repeats compare, report, the leaderboard and the dashboard read;
one run's results for `show` and Run detail; export) reads both against 4.21e10, the highest
calibration stored for that machine, the run's own figure beside it and a note where its stored
peak differs. Never an MFU above 1; GPU runs (datasheet peaks) and a user's own loop untouched."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from greenbench.aggregate import aggregate_repeat
from greenbench.cli import main
from greenbench.energy.base import EnergyWindow
from greenbench.results import RankResult, RunOutcome
from greenbench.store import Store, export, get_run, read_frame
from greenbench.store.views import RUN_RESULTS, ok_repeats_sql

HARDWARE = {"cpu_model": "Test CPU", "logical_cores": 2}
LOW, HIGH = 1.04e10, 4.21e10
#: FLOP/s per device each run achieved: 17.9 % of LOW, 6.1 % of HIGH
ACHIEVED = {"a": 0.179 * LOW, "b": 0.061 * HIGH}


def write_run(
    store: Store,
    run_id: str,
    achieved: float,
    peak: float,
    *,
    source: str = "cpu-gemm-calibration",
    host: str = "h1",
    nproc: int = 1,
    precision: str = "fp32",
    strategy: str = "single",
    hardware: dict | None = None,
) -> None:
    settings = {"model.family": "transformer", "model.size": "tiny", "seed": 0}
    store.begin_run({
        "run_id": run_id, "workload": "transformer-vs-mamba",
        "config_name": "transformer/tiny", "config": {"workload": "w", "settings": settings},
        "model_family": "transformer", "model_size": "tiny", "strategy": strategy,
        "layout": "dp1", "device": "cpu", "device_type": "cpu:Test CPU", "nproc": nproc,
        "nnodes": 1, "precision": precision, "seq_len": 64, "lengths": "fixed", "host": host,
        "hardware": HARDWARE if hardware is None else hardware,
    })  # fmt: skip
    ranks = [
        RankResult(
            rank=k, local_rank=k, host=host, repeat=0, tokens=1000, seconds=2.0, compute_s=2.0,
            comm_s=0.0, wait_s=0.0, step_times_s=(1.0, 1.0), peak_mem_bytes=1,
            flops=achieved * 2.0, loss=2.0, n_microbatches=1,
            energy=EnergyWindow("estimate", False, 2.0, 10.0),
        )
        for k in range(nproc)
    ]  # fmt: skip
    repeat = aggregate_repeat(
        ranks, idle_power_w=None, peak_flops=peak, n_devices=nproc, carbon_g_per_kwh=None
    )
    store.finish_run(
        run_id,
        RunOutcome(
            status="ok", repeats=[repeat], ranks=ranks, peak_flops=peak, peak_flops_source=source
        ),
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "g.duckdb"
    with Store(path) as store:
        write_run(store, "a" * 12, ACHIEVED["a"], LOW)
        write_run(store, "b" * 12, ACHIEVED["b"], HIGH)
    return path


def repeats(db: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    return read_frame(db, ok_repeats_sql(("run_id", *columns))).set_index("run_id")


def test_every_run_of_a_machine_reads_its_mfu_against_the_highest_calibration_stored(db):
    rows = repeats(db, ("mfu", "mfu_own_peak", "peak_consistent", "peak_note", "mfu_note"))
    a, b = rows.loc["a" * 12], rows.loc["b" * 12]
    assert a.mfu == pytest.approx(ACHIEVED["a"] / HIGH) and b.mfu == pytest.approx(0.061)
    assert a.mfu_own_peak == pytest.approx(0.179) and b.mfu_own_peak == pytest.approx(0.061)
    assert not a.peak_consistent and b.peak_consistent
    assert "1.04e+10" in a.peak_note and "4.21e+10" in a.peak_note and "2 threads" in a.peak_note
    assert "gave MFU 17.9%" in a.mfu_note and pd.isna(b.peak_note)
    # the stored figures are the runs' own, untouched
    stored = read_frame(db, "SELECT run_id, mfu FROM results ORDER BY run_id")
    assert stored["mfu"].tolist() == pytest.approx([0.179, 0.061])


def test_show_export_and_run_detail_read_the_same(db, tmp_path):
    (a,) = get_run(db, "a" * 12)["results"]
    assert a["mfu"] == pytest.approx(ACHIEVED["a"] / HIGH) and "17.9%" in a["mfu_note"]
    run = get_run(db, "a" * 12)
    assert run["peak_consistent"] is False and run["peak_flops_machine"] == HIGH
    detail = read_frame(db, RUN_RESULTS, ["a" * 12])
    assert detail["mfu"][0] == pytest.approx(ACHIEVED["a"] / HIGH)
    (path,) = export(db, "csv", tmp_path / "out.csv")
    out = pd.read_csv(path).set_index("run_id")
    assert out.loc["a" * 12, "mfu"] == pytest.approx(ACHIEVED["a"] / HIGH)
    assert out.loc["a" * 12, "mfu_own_peak"] == pytest.approx(0.179)
    shown = CliRunner().invoke(main, ["show", "a" * 12, "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert f"{ACHIEVED['a'] / HIGH:.2%}" in text and "4.21e+10" in text and "17.9%" in text


def test_an_mfu_unknown_against_its_own_low_peak_is_read_against_the_machine_s(tmp_path):
    db = tmp_path / "g.duckdb"
    with Store(db) as store:
        write_run(store, "c" * 12, 1.3 * LOW, LOW)  # 130 % of its own peak: stored unknown
        write_run(store, "b" * 12, ACHIEVED["b"], HIGH)
        write_run(store, "d" * 12, 1.2 * HIGH, LOW)  # above every calibration stored
    rows = repeats(db, ("mfu", "mfu_own_peak", "mfu_note"))
    c, d = rows.loc["c" * 12], rows.loc["d" * 12]
    assert pd.isna(c.mfu_own_peak) and c.mfu == pytest.approx(1.3 * LOW / HIGH)
    assert pd.isna(d.mfu) and d.mfu_note.startswith("MFU unknown: 120% of the machine's peak")
    assert read_frame(db, ok_repeats_sql(["mfu"]))["mfu"].max() <= 1


def test_only_one_machine_thread_count_and_precision_share_a_peak(tmp_path):
    db = tmp_path / "g.duckdb"
    with Store(db) as store:
        write_run(store, "a" * 12, ACHIEVED["a"], LOW)
        write_run(store, "1" * 12, ACHIEVED["b"], HIGH, host="h2")  # another machine
        write_run(store, "2" * 12, ACHIEVED["b"], HIGH, nproc=2)  # 1 thread per rank
        write_run(store, "3" * 12, ACHIEVED["b"], HIGH, precision="bf16")
        write_run(store, "4" * 12, ACHIEVED["b"], HIGH, hardware={"cpu_model": "Test CPU",
                                                                 "logical_cores": 4})  # fmt: skip
        write_run(store, "5" * 12, ACHIEVED["b"], HIGH, strategy="own-loop")  # torch's threads
        write_run(store, "6" * 12, 2e14, 9.89e14, source="datasheet:H100 SXM bf16")
    rows = repeats(db, ("mfu", "peak_consistent"))
    assert rows.loc["a" * 12, "mfu"] == pytest.approx(0.179)  # alone on its machine
    assert rows.loc["a" * 12, "peak_consistent"]
    assert pd.isna(rows.loc["5" * 12, "peak_consistent"])  # not checked
    assert pd.isna(rows.loc["6" * 12, "peak_consistent"])
    assert rows.loc["6" * 12, "mfu"] == pytest.approx(2e14 / 9.89e14)


def test_a_database_older_than_mfu_notes_still_shows_its_runs(db):
    import duckdb

    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE results DROP COLUMN mfu_note")
    con.close()
    (a,) = get_run(db, "a" * 12)["results"]
    assert a["mfu"] == pytest.approx(0.179)  # as stored


def test_the_dashboard_s_leaderboard_pools_mfu_read_against_one_peak(db):
    pytest.importorskip("streamlit")
    from greenbench.dashboard_app import data

    data.clear_cache()
    rows = data.repeats(db)
    assert sorted(rows["mfu"]) == pytest.approx(sorted([ACHIEVED["a"] / HIGH, 0.061]))
