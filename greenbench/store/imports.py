"""`greenbench import OTHER.duckdb`: another machine's runs brought into this database, so a team
builds one leaderboard from many machines.

Through the shard merge path (`greenbench.store.shards`) and its rule: the file is checked as a
shard is (a file that is not a greenbench results database, one newer than this code, or a
damaged one is refused whole, nothing imported; an older one is migrated), its rows replace the
database's rows of the same run ids table by table, and a stored run is never replaced by a
less finished copy of it, nor one that lacks result rows it holds (``shards.conflicts_by_run``).
Unlike a shard, an imported file belongs to the user: it is never changed nor deleted. It is
copied into a temporary folder first and the copy is checked, migrated and read; and where a
shard is merged all or nothing, an import judges run by run, in one transaction:

- **added**: a run this database does not hold;
- **updated**: one it holds, the file's copy more finished or with more of its rows;
- **unchanged**: one whose every row, in every table, is the same on both sides (importing a
  file twice adds nothing);
- **refused**: one the rule keeps as this database holds it (the file's copy is less
  finished, or lacks result rows), with why.

Runs keep every column as stored, their machine's fingerprint (``host``, ``hardware``,
``versions``, ``git_sha``) included, so each reader still tells the machines apart: a
configuration's rows pool only runs on the same kind of hardware
(`greenbench.vocabulary.SAME_CONFIGURATION`), and MFU is read against each host's own peak
(`greenbench.store.views`).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from greenbench.errors import StoreError
from greenbench.store import writer
from greenbench.store.connection import RUN_TABLES_SQL, FileRefused, _connect
from greenbench.store.shards import check_orphans, conflicts_by_run, replace_runs

_ALIAS = "greenbench_import"

#: the file to import refused, in words naming it as such (by ``FileRefused.kind``)
_REFUSED = {
    "unreadable": "cannot read {path} ({reason})",
    "not-duckdb": "{path} is not a DuckDB file ({reason}): import a greenbench results database",
    "unopenable": "DuckDB cannot open {path} ({reason})",
    "unwritable": "cannot copy {path} to check it ({reason})",
    "foreign": "{path} is a DuckDB file but not a greenbench results database ({reason})",
    "newer": "{path} has {reason}: import it with a newer greenbench",
    "damaged": "{path} is damaged ({reason}); nothing imported: restore it from a copy",
}
#: export files: a view joining runs and repeats, which cannot be split back into a run's rows
_EXPORTS = (".csv", ".json", ".parquet")


@dataclass
class ImportReport:
    """What an import did, by run id (the module docstring says what each list means)."""

    source: Path
    db_path: Path
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The counts in one line, then one line per refused run."""
        head = (
            f"imported {self.source} into {self.db_path}: {len(self.added)} added, "
            f"{len(self.updated)} updated, {len(self.unchanged)} unchanged, "
            f"{len(self.refused)} refused"
        )
        return [head] + [f"refused run {run_id}: {why}" for run_id, why in self.refused]


def import_database(
    db_path: str | Path, source: str | Path, *, lock_timeout_s: float = 5.0
) -> ImportReport:
    """Bring the runs of the results database ``source`` into ``db_path`` (created if missing),
    run by run (module docstring); ``source`` is left as it was. A source that is no greenbench
    results database, a newer or damaged one, or the database itself: StoreError, nothing
    imported."""
    db, src = Path(db_path), Path(source)
    if not src.is_file():
        raise StoreError(f"no file to import at {src}")
    if src.suffix.lower() in _EXPORTS:
        raise StoreError(
            f"{src} is an export (runs joined with their repeats), which cannot be split back "
            "into a run's rows: import the other machine's .duckdb results database"
        )
    if db.exists() and db.samefile(src):
        raise StoreError(f"{src} is the results database itself: import another machine's file")
    with tempfile.TemporaryDirectory(prefix="greenbench-import-") as tmp:
        copy = Path(tmp) / "import.duckdb"
        try:
            shutil.copyfile(src, copy)
            wal = src.with_name(src.name + ".wal")  # a copy left unclosed: its journal too
            if wal.is_file():
                shutil.copyfile(wal, copy.with_name(copy.name + ".wal"))
        except OSError as exc:
            raise StoreError(f"cannot read {src}: {exc.strerror}") from None
        try:  # refuses a foreign, newer or damaged file; migrates an older copy
            writer.Store(copy, lock_timeout_s=lock_timeout_s, verify=True, shard_fallback=False)
        except FileRefused as exc:
            raise StoreError(_REFUSED[exc.kind].format(path=src, reason=exc.reason)) from None
        store = writer.Store(db, lock_timeout_s=lock_timeout_s, verify=True, shard_fallback=False)
        report = ImportReport(src, db)
        _merge(store, copy, report, lock_timeout_s)
    return report


def _merge(store: writer.Store, copy: Path, report: ImportReport, timeout_s: float) -> None:
    """Judge and merge every run of ``copy`` in one transaction, filling ``report``."""
    con = _connect(store.path, read_only=False, timeout_s=timeout_s, on_wait=store.on_wait)
    try:
        tables = [t for (t,) in con.execute(RUN_TABLES_SQL).fetchall()]
        quoted = str(copy).replace("'", "''")
        con.execute(f"ATTACH '{quoted}' AS {_ALIAS} (READ_ONLY)")
        con.begin()
        try:
            check_orphans(con, tables, _ALIAS, f"of {report.source}")
            sql = f"SELECT run_id FROM {_ALIAS}.runs ORDER BY 1"
            theirs = [r for (r,) in con.execute(sql).fetchall()]
            ours = {r for (r,) in con.execute("SELECT run_id FROM runs").fetchall()}
            conflicts = conflicts_by_run(con, _ALIAS, what="file")
            same = _same_runs(con, tables)
            for run_id in theirs:
                if run_id not in ours:
                    report.added.append(run_id)
                elif run_id in conflicts:
                    report.refused.append((run_id, "; ".join(conflicts[run_id])))
                elif run_id in same:
                    report.unchanged.append(run_id)
                else:
                    report.updated.append(run_id)
            replace_runs(con, tables, _ALIAS, [*report.added, *report.updated])
            con.commit()
        except BaseException:
            con.rollback()
            raise
    except duckdb.Error as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise StoreError(f"importing failed, nothing imported: {reason}") from None
    finally:
        con.close()


def _same_runs(con: duckdb.DuckDBPyConnection, tables: list[str]) -> set[str]:
    """The run ids both sides hold with the same rows in every table: per run and table, the
    digest of its rows' digests in sorted order (each row as text, every column, taken by name
    in the database's order; the copy has been migrated to the same schema)."""
    differ: set[str] = set()
    both = f"run_id IN (SELECT run_id FROM runs) AND run_id IN (SELECT run_id FROM {_ALIAS}.runs)"
    for table in tables:
        columns = [c for (c, *_) in con.execute(f'DESCRIBE "{table}"').fetchall()]
        row = f"md5(CAST(row({', '.join(f't.{_quote(c)}' for c in columns)}) AS VARCHAR))"
        sql = (
            f"SELECT run_id, md5(string_agg({row}, ',' ORDER BY {row})) FROM {{}} AS t "
            f"WHERE {both} GROUP BY run_id"
        )
        mine = dict(con.execute(sql.format(_quote(table))).fetchall())
        other = dict(con.execute(sql.format(f"{_ALIAS}.{_quote(table)}")).fetchall())
        differ |= {r for r in mine.keys() | other.keys() if mine.get(r) != other.get(r)}
    stored = {r for (r,) in con.execute(f"SELECT run_id FROM runs WHERE {both}").fetchall()}
    return stored - differ


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
