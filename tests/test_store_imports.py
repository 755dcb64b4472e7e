"""`greenbench import OTHER.duckdb`: another machine's runs brought into this database through
the shard merge path: idempotent by run id, never a finished run replaced by a less finished
copy, each run's machine fingerprint kept, the source file never changed nor deleted, and a
file that cannot be imported refused whole in one line, exit 2."""

from __future__ import annotations

import hashlib
import json
import shutil
from importlib import resources
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.errors import StoreError
from greenbench.store import SCHEMA_VERSION, check_integrity, get_run, import_database

TABLES = ("runs", "results", "rank_results", "power_samples", "comm_records")


def rows_of(db: Path) -> dict[str, list[tuple]]:
    """Every row of every run table, sorted: what "the same rows" means."""
    with duckdb.connect(str(db), read_only=True) as con:
        return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def other_machine(seeded_db: Path, tmp_path: Path) -> Path:
    """The seeded database as another machine would have it: new run ids, its own host and
    hardware (and so its own fingerprint)."""
    other = tmp_path / "other.duckdb"
    shutil.copyfile(seeded_db, other)
    hardware = {"cpu_model": "AMD EPYC 9654", "logical_cores": 192, "gpus": []}
    with duckdb.connect(str(other)) as con:
        tables = [t for (t,) in con.execute("SHOW TABLES").fetchall() if t in TABLES]
        for table in tables:  # run ids of 12 hex characters, not the seeded ones
            con.execute(f"UPDATE {table} SET run_id = 'e' || substr(run_id, 2)")
        con.execute("UPDATE runs SET host = 'bench-02', hardware = ?", [json.dumps(hardware)])
    return other


def test_importing_twice_adds_the_runs_once_and_keeps_the_source(
    seeded_db: Path, tmp_path: Path
) -> None:
    db = tmp_path / "team.duckdb"
    source = digest(seeded_db)
    first = CliRunner().invoke(main, ["import", str(seeded_db), "--db", str(db)])
    assert first.exit_code == 0, first.output
    assert f"imported {seeded_db} into {db}: 12 added, 0 updated, 0 unchanged, 0 refused" in (
        first.stdout
    )
    assert rows_of(db) == rows_of(seeded_db) and check_integrity(db) == []
    once = rows_of(db)
    second = import_database(db, seeded_db)
    assert (len(second.added), len(second.updated), len(second.refused)) == (0, 0, 0)
    assert len(second.unchanged) == 12
    assert rows_of(db) == once  # the same rows, nothing doubled
    assert seeded_db.exists() and digest(seeded_db) == source  # read, never changed


def test_another_machine_s_runs_keep_their_fingerprint(seeded_db: Path, tmp_path: Path) -> None:
    other = other_machine(seeded_db, tmp_path)
    report = import_database(seeded_db, other)
    assert len(report.added) == 12 and not report.unchanged and not report.refused
    with duckdb.connect(str(seeded_db), read_only=True) as con:
        hosts = dict(con.execute("SELECT host, count(*) FROM runs GROUP BY host").fetchall())
    assert hosts == {"bench-01": 12, "bench-02": 12}
    for run_id in report.added:
        theirs = duckdb.connect(str(other), read_only=True)
        try:
            want = theirs.execute(
                "SELECT host, hardware, versions, git_sha FROM runs WHERE run_id = ?", [run_id]
            ).fetchone()
        finally:
            theirs.close()
        run = get_run(seeded_db, run_id)
        got = (run["host"], run["hardware"], run["versions"], run["git_sha"])
        assert got == (want[0], json.loads(want[1]), json.loads(want[2]), want[3])
    assert check_integrity(seeded_db) == []


def test_a_less_finished_copy_never_replaces_a_finished_run(
    seeded_db: Path, tmp_path: Path
) -> None:
    stale = tmp_path / "stale.duckdb"
    shutil.copyfile(seeded_db, stale)
    with duckdb.connect(str(stale)) as con:
        (run_id,) = con.execute(
            "SELECT run_id FROM runs WHERE status = 'ok' ORDER BY run_id LIMIT 1"
        ).fetchone()
        con.execute("UPDATE runs SET status = 'running' WHERE run_id = ?", [run_id])
        for table in ("results", "rank_results", "power_samples", "comm_records"):
            con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
    before = rows_of(seeded_db)
    result = CliRunner().invoke(main, ["import", str(stale), "--db", str(seeded_db)])
    assert result.exit_code == 0, result.output
    assert "0 added, 0 updated, 11 unchanged, 1 refused" in result.stdout
    (why,) = result.stderr.strip().splitlines()
    assert why.startswith(f"refused run {run_id}: run {run_id} is stored ok, the file has it ")
    assert "lacks 3 result row(s)" in why
    assert rows_of(seeded_db) == before
    assert get_run(seeded_db, run_id)["status"] == "ok"

    # the other way round: the finished copy replaces the stale one
    report = import_database(stale, seeded_db)
    assert report.updated == [run_id] and not report.refused and not report.added
    assert rows_of(stale) == before


def test_an_older_schema_is_migrated_in_a_copy(tmp_path: Path) -> None:
    old = tmp_path / "old.duckdb"
    with duckdb.connect(str(old)) as con:
        con.execute(resources.files("greenbench").joinpath("store_schema.sql").read_text())
        con.execute("INSERT INTO schema_version VALUES (1, now())")
        row = {
            "run_id": "aaaaaaaaaaaa", "workload": "transformer-vs-mamba",
            "config_name": "transformer/tiny", "config_key": "0" * 16, "config": "{}",
            "model_family": "transformer", "model_size": "tiny", "strategy": "single",
            "layout": "dp1", "device": "cpu", "device_type": "cpu:Test CPU", "nproc": 1,
            "nnodes": 1, "precision": "fp32", "seq_len": 256, "lengths": "fixed",
            "status": "failed", "started_at": "2026-11-01", "host": "bench-03",
        }  # fmt: skip
        con.execute(
            f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
            list(row.values()),
        )
    kept = digest(old)
    db = tmp_path / "g.duckdb"
    report = import_database(db, old)
    assert report.added == ["aaaaaaaaaaaa"]
    run = get_run(db, "aaaaaaaaaaaa")
    assert run["host"] == "bench-03" and run["dp_replicate"] == 1  # a later version's column
    assert digest(old) == kept


def newer(path: Path) -> None:
    with duckdb.connect(str(path)) as con:
        con.execute("INSERT INTO schema_version VALUES (?, now())", [SCHEMA_VERSION + 1])


def damaged(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)


def foreign(path: Path) -> None:
    path.unlink()
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE t (x INTEGER)")


def not_duckdb(path: Path) -> None:
    path.write_text("run_id,energy_j\n")


@pytest.mark.parametrize(
    ("spoil", "said"),
    [
        (newer, "newer than this greenbench understands"),
        (damaged, "is damaged"),
        (foreign, "not a greenbench results database"),
        (not_duckdb, "is not a DuckDB file"),
    ],
)
def test_a_file_that_cannot_be_imported_is_refused_in_one_line(
    seeded_db: Path, tmp_path: Path, spoil, said: str
) -> None:
    bad = tmp_path / "bad.duckdb"
    shutil.copyfile(seeded_db, bad)
    spoil(bad)
    kept = digest(bad)
    for db in (seeded_db, tmp_path / "new.duckdb"):
        before = rows_of(db) if db.exists() else None
        result = CliRunner().invoke(main, ["import", str(bad), "--db", str(db)])
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: ") and said in line and str(bad) in line
        assert (rows_of(db) if db.exists() else None) == before  # nothing imported, nor made
    assert digest(bad) == kept


def test_exports_and_the_database_itself_are_refused(seeded_db: Path, tmp_path: Path) -> None:
    export = tmp_path / "results.parquet"
    export.write_bytes(b"PAR1")
    with pytest.raises(StoreError, match="an export"):
        import_database(seeded_db, export)
    with pytest.raises(StoreError, match="the results database itself"):
        import_database(seeded_db, seeded_db)
    with pytest.raises(StoreError, match="no file to import"):
        import_database(seeded_db, tmp_path / "missing.duckdb")


def test_a_copy_with_other_rows_of_a_run_updates_it(seeded_db: Path, tmp_path: Path) -> None:
    """Same status, same repeats, one figure differs (a recomputed result): updated, not
    unchanged, and the copy's figure is the one stored."""
    copy = tmp_path / "copy.duckdb"
    shutil.copyfile(seeded_db, copy)
    with duckdb.connect(str(copy)) as con:
        (run_id,) = con.execute("SELECT min(run_id) FROM power_samples").fetchone()
        con.execute(
            "UPDATE power_samples SET power_w = power_w + 1 WHERE run_id = ? AND t_s = 0",
            [run_id],
        )
    report = import_database(seeded_db, copy)
    assert report.updated == [run_id] and len(report.unchanged) == 11
    assert rows_of(seeded_db) == rows_of(copy)
