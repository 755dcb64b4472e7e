"""MFU is never stored or shown above 1 (reliability issue, item 11).

A CPU peak calibrated while other processes held cores comes out low, and a run then "beats"
it. The launcher answers by measuring the peak again after the run and recomputing MFU; where
the run still beats it, MFU is stored unknown with its reason, never clamped to 1. The
calibration is faked at its boundaries (the GEMM timing and the kernel's CPU counters); the
runs are real single-rank runs of a tiny Transformer.
"""

from __future__ import annotations

import itertools
import json
from importlib import resources
from pathlib import Path

import duckdb
import helpers
import pytest
import torch
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.hardware import cpu_peak
from greenbench.launcher.launch import run_specs
from greenbench.launcher.runners.torchrun import aggregate_checked
from greenbench.results import RankResult
from greenbench.spec import expand
from greenbench.store import MIGRATIONS, Store, read_frame

QUICK = {**helpers.QUICK, "repeats": 2}
LOW, TRUE = 1e3, 1e15  # FLOP/s: far below anything a run reaches; far above


def quick_spec():
    return expand("transformer-vs-mamba", [QUICK])[0]


@pytest.fixture
def calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A fresh calibration cache; returns the list the fake GEMM timings are appended to."""
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})
    monkeypatch.setattr(cpu_peak, "_GEMM_RECORDS", {})
    monkeypatch.setattr(cpu_peak, "_cores", lambda: 2)
    return []


def machine(
    monkeypatch: pytest.MonkeyPatch, taken: list[float], figures: list[float], busy: list[float]
) -> None:
    """The k-th calibration measures ``figures[k]`` while other processes keep ``busy[k]`` of
    the 2 cores busy (the kernel's counters as it would read them, one second per reading)."""
    ticks = itertools.count()
    total = [0.0]

    def counters() -> tuple[float, float, float]:
        t = float(next(ticks))
        if t:  # the interval that ends now belongs to the calibration just taken
            total[0] += busy[max(len(taken) - 1, 0)] + 1.0
        return t, total[0], t  # wall s, machine busy CPU-s, this process's CPU-s

    def measure(dtype: torch.dtype, budget_s: float) -> float:
        taken.append(figures[len(taken)])
        return taken[-1]

    monkeypatch.setattr(cpu_peak, "_cpu_counters", counters)
    monkeypatch.setattr(cpu_peak, "_measure_gemm_flops", measure)


def stored(db: Path):
    return read_frame(
        db,
        "SELECT r.run_id, r.peak_flops, r.peak_flops_source, x.repeat, x.mfu, x.mfu_note, "
        "x.flops / x.seconds AS achieved FROM runs r JOIN results x USING (run_id) "
        "ORDER BY x.repeat",
    )


@pytest.mark.slow
def test_a_peak_calibrated_under_load_is_measured_again_after_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calibration: list[float]
) -> None:
    """Calibrated while others held 1.5 cores, the peak is far too low and the run beats it;
    measured again once the machine is quiet, the stored peak is the new one and every MFU is a
    real fraction, each repeat saying what happened."""
    machine(monkeypatch, calibration, [LOW, TRUE], busy=[1.5, 0.0])
    db = tmp_path / "g.duckdb"
    assert run_specs([quick_spec()], db).statuses == ["ok"]
    assert calibration == [LOW, TRUE]  # once before the run, once after it
    rows = stored(db)
    assert (rows["peak_flops"] == TRUE).all()
    assert (rows["peak_flops_source"] == cpu_peak.CPU_GEMM_SOURCE).all()
    for row in rows.itertuples():
        assert row.mfu == pytest.approx(row.achieved / TRUE)  # recomputed, not clamped
        assert 0 < row.mfu < 1
        assert "re-measured after the run" in row.mfu_note and "under load" in row.mfu_note
        assert "quiet" in row.mfu_note
    entry = json.loads((tmp_path / "cache" / "gemm.json").read_text())
    assert [e["flops"] for e in entry.values()] == [TRUE]  # the next run starts from it
    assert [e["trusted"] for e in entry.values()] == [True]


@pytest.mark.slow
def test_a_run_that_still_beats_its_peak_stores_mfu_unknown_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calibration: list[float]
) -> None:
    """The machine stays busy: the recalibration is as low as the first. MFU is stored NULL
    (not 1, not 10^9 %) with the reason, and `greenbench show` prints it."""
    machine(monkeypatch, calibration, [LOW, LOW], busy=[1.5, 1.5])
    db = tmp_path / "g.duckdb"
    assert run_specs([quick_spec()], db).statuses == ["ok"]
    assert calibration == [LOW, LOW]  # measured again once, not in a loop
    rows = stored(db)
    assert len(rows) == 2 and (rows["peak_flops"] == LOW).all()
    assert rows["mfu"].isna().all()  # unknown: neither clamped to 1 nor left above it
    for row in rows.itertuples():
        assert row.achieved > LOW  # the run did beat the peak
        assert row.mfu_note.startswith("MFU unknown") and "re-measured" in row.mfu_note
    assert read_frame(db, "SELECT count(*) AS n FROM results WHERE mfu > 1")["n"][0] == 0

    run_id = rows["run_id"][0]
    shown = CliRunner().invoke(main, ["show", run_id, "--db", str(db)], catch_exceptions=False)
    assert shown.exit_code == 0
    text = " ".join(shown.output.split())
    assert "MFU of repeat 0: MFU unknown" in text and "MFU of repeat 1: MFU unknown" in text
    assert "under load" in text


def test_a_datasheet_peak_beaten_is_not_recalibrated_and_mfu_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_measuring(*_args: object) -> float:
        raise AssertionError("a GPU datasheet figure is not re-measured")

    monkeypatch.setattr(cpu_peak, "_measure_gemm_flops", no_measuring)
    spec = quick_spec()
    ranks = [
        RankResult(rank=0, local_rank=0, host="h", repeat=k, tokens=64, seconds=2.0,
                   compute_s=2.0, comm_s=0.0, wait_s=0.0, step_times_s=(1.0, 1.0),
                   peak_mem_bytes=1, flops=4e12, loss=1.0, n_microbatches=2, energy=None)
        for k in range(2)
    ]  # fmt: skip
    repeats, peak = aggregate_checked(
        spec, ranks, 1e12, "datasheet:H100 SXM bf16",
        n_devices=1, idle_power_w=None, carbon_g_per_kwh=None,
    )  # fmt: skip
    assert peak == 1e12
    assert [r.mfu for r in repeats] == [None, None]  # 200 % of the datasheet: unknown
    assert all(r.mfu_note.startswith("MFU unknown") and "200%" in r.mfu_note for r in repeats)
    repeats, _ = aggregate_checked(
        spec, ranks, 4e12, "datasheet:H100 SXM bf16",
        n_devices=1, idle_power_w=None, carbon_g_per_kwh=None,
    )  # fmt: skip
    assert [r.mfu for r in repeats] == [0.5, 0.5] and [r.mfu_note for r in repeats] == ["", ""]


def test_stored_mfu_above_one_becomes_unknown_with_the_number_in_its_note(
    tmp_path: Path,
) -> None:
    """A database written before schema 4 (the smoke suite stored MFU 1.16 and 1.02)."""
    db = tmp_path / "v3.duckdb"
    con = duckdb.connect(str(db))
    con.execute(resources.files("greenbench").joinpath("store_schema.sql").read_text())
    con.execute("INSERT INTO schema_version VALUES (1, now())")
    for version in (1, 2):  # up to schema 3, as the previous release left it
        step = MIGRATIONS[version]
        if isinstance(step, str):
            con.execute(step)
        else:
            step(con)
        con.execute("INSERT INTO schema_version VALUES (?, now())", [version + 1])
    for repeat, mfu in enumerate((1.16, 0.42, None)):
        con.execute(
            "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, energy_source,"
            " energy_measured, mfu) VALUES ('aaaaaaaaaaaa', ?, 64, 1.0, 64.0, 'estimate', false,"
            " ?)",
            [repeat, mfu],
        )
    con.close()

    Store(db)  # migrates
    rows = read_frame(db, "SELECT repeat, mfu, mfu_note FROM results ORDER BY repeat")
    assert rows["mfu"].isna().tolist() == [True, False, True]
    assert rows["mfu"][1] == pytest.approx(0.42)
    assert rows["mfu_note"][0].startswith("MFU unknown: 116% of the peak was stored")
    assert rows["mfu_note"][1:].isna().all()
