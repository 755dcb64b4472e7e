"""`greenbench export --format codecarbon|bmf`: the files read back by the other tools' own
column and field names, their figures the database's in those tools' units."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.energy._codecarbon import EMISSIONS_COLUMNS, emissions_columns
from greenbench.reporting.interchange import BMF_MEASURES, export
from greenbench.reporting.leaderboard import leaderboard
from greenbench.reporting.refs import query_results

#: CodeCarbon's emissions.csv columns where CodeCarbon is not installed: the fields of
#: ``EmissionsData`` in codecarbon/output_methods/emissions_data.py (CodeCarbon 3.3.2)
DOCUMENTED_COLUMNS = (
    "timestamp", "project_name", "run_id", "experiment_id", "duration", "emissions",
    "emissions_rate", "cpu_power", "gpu_power", "ram_power", "cpu_energy", "gpu_energy",
    "ram_energy", "energy_consumed", "water_consumed", "country_name", "country_iso_code",
    "region", "cloud_provider", "cloud_region", "os", "python_version", "codecarbon_version",
    "cpu_count", "cpu_model", "gpu_count", "gpu_model", "longitude", "latitude",
    "ram_total_size", "tracking_mode", "cpu_utilization_percent", "gpu_utilization_percent",
    "ram_utilization_percent", "ram_used_gb", "on_cloud", "pue", "wue",
)  # fmt: skip
#: Bencher Metric Format: a measure's fields (bencher.dev, "Bencher Metric Format")
BMF_FIELDS = {"value", "lower_value", "upper_value"}


def codecarbon_columns() -> tuple[str, ...]:
    """The installed CodeCarbon's own ``EmissionsData`` fields, else the documented list."""
    try:
        from codecarbon.output_methods.emissions_data import EmissionsData
    except ImportError:
        return DOCUMENTED_COLUMNS
    return tuple(f.name for f in dataclasses.fields(EmissionsData))


def test_the_columns_are_read_from_the_installed_codecarbon() -> None:
    """Read from its source without importing it, they are its dataclass's fields; the list
    kept for a machine without CodeCarbon is the documented one."""
    assert emissions_columns() == codecarbon_columns()
    assert EMISSIONS_COLUMNS == DOCUMENTED_COLUMNS


def totals(db: Path) -> dict[str, dict[str, float | None]]:
    """Per ok run, its repeats' sums as stored (None where a repeat lacks the figure)."""
    parts = ("seconds", "energy_j", "energy_cpu_j", "energy_gpu_j", "energy_dram_j", "co2_g")
    sums = ", ".join(f"CASE WHEN count({c}) = count(*) THEN sum({c}) END" for c in parts)
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            f"SELECT run_id, {sums} FROM results JOIN runs USING (run_id) "
            "WHERE status = 'ok' GROUP BY run_id"
        ).fetchall()
    return {r[0]: dict(zip(parts, r[1:], strict=True)) for r in rows}


def cell(row: dict[str, str], column: str) -> float | None:
    return float(row[column]) if row[column] != "" else None


def test_codecarbon_export_has_codecarbon_s_columns_and_units(
    seeded_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "emissions.csv"
    result = CliRunner().invoke(
        main, ["export", "--format", "codecarbon", "--out", str(out), "--db", str(seeded_db)]
    )
    assert result.exit_code == 0, result.output
    with out.open(newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == codecarbon_columns()
        rows = {r["run_id"]: r for r in reader}
    stored = totals(seeded_db)
    assert set(rows) == set(stored)  # one row per ok run (the failed one has no figures)
    for run_id, row in rows.items():
        want = stored[run_id]
        duration = want["seconds"]
        assert cell(row, "duration") == pytest.approx(duration)
        assert cell(row, "energy_consumed") == pytest.approx(want["energy_j"] / 3.6e6)
        assert cell(row, "emissions") == pytest.approx(want["co2_g"] / 1000)
        assert cell(row, "emissions_rate") == pytest.approx(want["co2_g"] / 1000 / duration)
        assert cell(row, "cpu_energy") == pytest.approx(want["energy_cpu_j"] / 3.6e6)
        assert cell(row, "cpu_power") == pytest.approx(want["energy_cpu_j"] / duration)
        if want["energy_dram_j"] is None:  # an estimate reads no DRAM: left empty, not 0
            assert row["ram_energy"] == "" and row["ram_power"] == ""
        else:
            assert cell(row, "ram_energy") == pytest.approx(want["energy_dram_j"] / 3.6e6)
        assert row["gpu_energy"] == "" and row["gpu_power"] == ""
        # from the fingerprint; what greenbench does not know stays empty
        assert row["cpu_model"].startswith("Intel(R) Xeon(R)") and row["cpu_count"] == "2"
        assert row["gpu_count"] == "0" and row["python_version"] == "3.11.7"
        assert row["project_name"] == "seeded" and len(row["experiment_id"]) == 16
        assert row["country_iso_code"] == "" and row["on_cloud"] == ""  # region "world"
        for unknown in ("water_consumed", "longitude", "latitude", "tracking_mode",
                        "codecarbon_version", "cpu_utilization_percent"):  # fmt: skip
            assert row[unknown] == ""
    measured = [r for r in rows.values() if r["ram_energy"] != ""]
    assert len(measured) == 1  # the rapl run: cpu and dram
    energy_parts = cell(measured[0], "cpu_energy") + cell(measured[0], "ram_energy")
    assert energy_parts == pytest.approx(cell(measured[0], "energy_consumed"))


def test_codecarbon_itself_appends_to_the_export(seeded_db: Path, tmp_path: Path) -> None:
    """CodeCarbon's own file output takes the export as its emissions.csv: same header, so it
    appends its row instead of backing the file up as a changed format."""
    file_output = pytest.importorskip("codecarbon.output_methods.file")
    from codecarbon.output_methods.emissions_data import EmissionsData

    folder = tmp_path / "out"
    folder.mkdir()
    export(seeded_db, "codecarbon", folder)  # a folder: emissions.csv inside it
    out = folder / "emissions.csv"
    ours = out.read_text().splitlines()
    fields = {f.name: None for f in dataclasses.fields(EmissionsData)}
    theirs = EmissionsData(**fields | {"run_id": "codecarbon-run", "duration": 1.0})
    file_output.FileOutput("emissions.csv", str(folder)).out(theirs, None)
    assert [p.name for p in folder.iterdir()] == ["emissions.csv"]  # no backup
    lines = out.read_text().splitlines()
    assert lines[: len(ours)] == ours and len(lines) == len(ours) + 1
    assert "codecarbon-run" in lines[-1]


def test_bmf_export_is_the_leaderboard_in_bencher_s_fields(seeded_db: Path, tmp_path: Path) -> None:
    # a second run of one configuration on the same commit: 6 repeats, a 95 % CI
    with duckdb.connect(str(seeded_db)) as con:
        (run_id,) = con.execute(
            "SELECT run_id FROM runs WHERE energy_source = 'estimate' AND status = 'ok' "
            "ORDER BY started_at LIMIT 1"
        ).fetchone()
        copy = "f" + run_id[1:]
        for table in ("runs", "results", "rank_results"):
            con.execute(
                f"INSERT INTO {table} SELECT * REPLACE (? AS run_id) FROM {table} WHERE run_id = ?",
                [copy, run_id],
            )
    out = tmp_path / "bmf.json"
    result = CliRunner().invoke(
        main, ["export", "--format", "bmf", "--out", str(out), "--db", str(seeded_db)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    board = leaderboard(query_results(seeded_db), scope="latest")
    assert len(doc) == len(board)  # one benchmark per leaderboard row, names unique
    for measures in doc.values():
        assert set(measures) <= set(BMF_MEASURES.values())
        for measure in measures.values():
            assert set(measure) <= BMF_FIELDS and "value" in measure
            assert all(isinstance(v, float | int) and math.isfinite(v) for v in measure.values())
            if "lower_value" in measure:
                assert measure["lower_value"] <= measure["value"] <= measure["upper_value"]
    six = board[board["n_repeats"] == 6]
    assert len(six) == 1
    row = six.iloc[0]
    name = f"{row.workload}/{row.config_name} (estimate)"
    jpt = doc[name]["joules-per-token"]
    assert jpt == {
        "value": pytest.approx(row.joules_per_token),
        "lower_value": pytest.approx(row.joules_per_token_ci_low),
        "upper_value": pytest.approx(row.joules_per_token_ci_high),
    }
    assert doc[name]["tokens-per-second"]["value"] == pytest.approx(row.tokens_per_s)
    assert "lower_value" not in doc[name]["peak-memory-bytes"]  # a maximum, no interval
    # three repeats allow no 95 % CI: the value alone (the min–max range is not one)
    three = board[(board["n_repeats"] == 3) & board["energy_measured"].astype(bool)].iloc[0]
    measured = doc[f"{three.workload}/{three.config_name} (measured (rapl))"]
    assert set(measured["joules-per-token"]) == {"value"}
    assert measured["mfu"]["value"] == pytest.approx(three.mfu)


def test_bmf_of_a_database_without_a_leaderboard_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from greenbench.store import Store

    db = tmp_path / "empty.duckdb"
    Store(db)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    result = CliRunner().invoke(main, ["export", "--format", "bmf", "--db", str(db)])
    assert result.exit_code == 2 and "no leaderboard row" in result.stderr
    assert list(here.iterdir()) == []  # nothing written (the default bmf.json)
