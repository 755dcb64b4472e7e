"""Result shards: a run's rows in a small DuckDB file of their own beside the results database,
folded into it later by `greenbench merge` or by the launcher's next open of the database.

Why: DuckDB lets one process write and, while any other process holds the file (a dashboard,
an export, a notebook), nobody can. A measurement that took minutes must never be lost to that:
when the launcher's final write cannot get the lock in time, the run goes to
``<db>.shards/<run_id>.duckdb`` instead, and the run counts as stored. Cluster jobs, which must
never write the shared file, write the same shards.

A shard is a greenbench results database (made by the store's own schema and migrations,
``writer.write_shard``), written under a hidden temporary name and renamed when complete, so a
shard on disk is never half written. Merging takes one transaction per shard and replaces the
rows of the runs the shard holds, so merging the same shard twice adds nothing; a shard of an
older schema is migrated like a database, and a damaged shard, a newer one, a file that is no
shard (named as a shard, not as the database), or one whose rows belong to no run in it is
reported and left where it is, with nothing of it merged. A merged shard is deleted.

A merge never loses what the database holds. A shard replaces a stored run only when it holds
the run at least as finished (``FINISHED``: running < failed, interrupted, skipped < ok; so a
run collected as failed takes its job's later ok shard, and a job's own account of how a run
ended replaces the submitter's) and with every result row (repeat) the database has for it. A
shard that would take a run back (an ok run to running or failed: a stale copy, a leftover of
a job collected another way) or drop a result row is a conflict: reported with the run, both
statuses and the repeats it lacks, and left in place, nothing of it merged.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from greenbench.errors import StoreError
from greenbench.store import writer
from greenbench.store.connection import (
    RUN_TABLES_SQL,
    DatabaseLocked,
    FileRefused,
    _connect,
    shard_dir,
)

_ALIAS = "greenbench_shard"

#: how finished a run of each status is; a merge never takes a run to a less finished status:
#: running (begun, not closed) < closed without results (failed, interrupted, skipped: whoever
#: saw the end last has the word, e.g. a job's own shard over the submitter's account of the
#: scheduler's verdict) < ok (closed with its results)
FINISHED = {"running": 0, "failed": 1, "interrupted": 1, "skipped": 1, "ok": 2}

#: a shard the store refused, in words naming it as a shard (by ``FileRefused.kind``)
_SHARD_REFUSED = {
    "unreadable": "the shard cannot be read ({reason})",
    "not-duckdb": (
        "not a DuckDB file ({reason}), so not a shard greenbench wrote: move it out of the "
        "shard folder, or delete it"
    ),
    "unopenable": "DuckDB cannot open the shard ({reason}): restore it from a copy, or delete it",
    "unwritable": "the shard is not a writable file (merging checks it in place): make it writable",
    "foreign": (
        "a DuckDB file but not a greenbench result shard ({reason}): move it out of the shard "
        "folder"
    ),
    "newer": "the shard has {reason}: merge it with a newer greenbench",
    "damaged": (
        "the shard is damaged ({reason}); nothing of it merged and the file left unchanged: "
        "restore it from a copy, or delete it"
    ),
}


def pending_shards(db_path: str | Path, only: Collection[str] | None = None) -> list[Path]:
    """Complete shards waiting to be merged into ``db_path`` (hidden temporaries excluded);
    with ``only``, those of these run ids alone."""
    folder = shard_dir(db_path)
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.name.endswith(writer.SHARD_SUFFIX)
        and not p.name.startswith(".")
        and p.is_file()
        and (only is None or p.name.removesuffix(writer.SHARD_SUFFIX) in only)
    )


@dataclass
class MergeReport:
    """What a merge did: the shards merged (with their run ids) and those left, with why."""

    db_path: Path
    merged: list[tuple[Path, list[str]]] = field(default_factory=list)
    left: list[tuple[Path, str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        """One line per shard, for the user."""
        done = [
            f"merged shard {shard.name} into {self.db_path}: run(s) {', '.join(ids) or 'none'}"
            for shard, ids in self.merged
        ]
        return done + [f"left shard {shard} in place: {why}" for shard, why in self.left]


def merge_pending(
    store: writer.Store, *, timeout_s: float, only: Collection[str] | None = None
) -> MergeReport:
    """Merge every pending shard of ``store``'s database (with ``only``, those of these run
    ids), one transaction each, deleting each shard once merged; waits ``timeout_s`` for the
    database's lock, then leaves the rest."""
    report = MergeReport(store.path)
    waiting = pending_shards(store.path, only)
    for i, shard in enumerate(waiting):
        try:
            run_ids = _merge_one(store, shard, timeout_s)
        except DatabaseLocked as exc:
            report.left += [(s, f"{exc}; run `greenbench merge` later") for s in waiting[i:]]
            break
        except StoreError as exc:
            report.left.append((shard, str(exc)))
            continue
        report.merged.append((shard, run_ids))
        try:
            for path in (shard, shard.with_name(shard.name + ".wal")):
                path.unlink(missing_ok=True)
        except OSError as exc:
            report.left.append((shard, f"merged, but not deleted ({exc.strerror}): delete it"))
    return report


def merge_shards(db_path: str | Path, *, lock_timeout_s: float = 5.0) -> MergeReport:
    """`greenbench merge`: check the database (every block read), then merge its shards; a
    database that does not exist yet is created when there are shards to put in it."""
    db = Path(db_path)
    if not db.exists() and not pending_shards(db):
        raise StoreError(f"no results database at {db} and no shards in {shard_dir(db)}")
    store = writer.Store(db, lock_timeout_s=lock_timeout_s, verify=True)
    return merge_pending(store, timeout_s=lock_timeout_s)


def _merge_one(store: writer.Store, shard: Path, timeout_s: float) -> list[str]:
    """Merge one shard in one transaction; StoreError (nothing merged) if it cannot be."""
    try:  # refuses a foreign, newer or damaged shard; migrates an older one in place
        writer.Store(shard, lock_timeout_s=timeout_s, verify=True, shard_fallback=False)
    except FileRefused as exc:  # said of the shard, not of the results database
        raise StoreError(_SHARD_REFUSED[exc.kind].format(reason=exc.reason)) from None
    except StoreError as exc:  # a lock on the shard is the shard's problem, not the database's
        raise StoreError(str(exc)) from None
    con = _connect(store.path, read_only=False, timeout_s=timeout_s, on_wait=store.on_wait)
    try:
        tables = [t for (t,) in con.execute(RUN_TABLES_SQL).fetchall()]
        quoted = str(shard).replace("'", "''")
        con.execute(f"ATTACH '{quoted}' AS {_ALIAS} (READ_ONLY)")
        con.begin()
        try:
            run_ids = [
                r for (r,) in con.execute(f"SELECT run_id FROM {_ALIAS}.runs ORDER BY 1").fetchall()
            ]
            check_orphans(con, tables, _ALIAS, "of the shard")
            conflicts = [c for found in conflicts_by_run(con, _ALIAS).values() for c in found]
            if conflicts:
                raise StoreError(
                    f"it conflicts with the database, nothing of it merged: {'; '.join(conflicts)}"
                    " (if the database is right, delete the shard)"
                )
            replace_runs(con, tables, _ALIAS)
            con.commit()
        except BaseException:
            con.rollback()
            raise
    except duckdb.Error as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise StoreError(f"merging failed, nothing of it merged: {reason}") from None
    finally:
        con.close()
    return run_ids


def check_orphans(con: duckdb.DuckDBPyConnection, tables: list[str], alias: str, of: str) -> None:
    """StoreError (nothing merged) when a table of the attached file ``alias`` holds rows of
    no run in its ``runs``; ``of`` names the file in the message ("of the shard")."""
    ours = f"run_id IN (SELECT run_id FROM {alias}.runs)"
    for table in tables:
        (orphans,) = con.execute(
            f"SELECT count(*) FROM {alias}.{table} WHERE NOT {ours}"
        ).fetchone()
        if orphans:
            raise StoreError(f"{orphans} {table} row(s) belong to no run {of}; nothing merged")


def replace_runs(
    con: duckdb.DuckDBPyConnection,
    tables: list[str],
    alias: str,
    run_ids: Collection[str] | None = None,
) -> None:
    """Inside the caller's transaction: every row of the runs the attached file ``alias`` holds
    (with ``run_ids``, of these alone) replaces the database's rows of those runs, table by
    table, columns matched by name."""
    if run_ids is None:
        which, params = f"SELECT run_id FROM {alias}.runs", []
    else:
        params = sorted(run_ids)
        if not params:
            return
        which = ", ".join("?" * len(params))
    for table in tables:
        con.execute(f"DELETE FROM {table} WHERE run_id IN ({which})", params)
        con.execute(
            f"INSERT INTO {table} BY NAME SELECT * FROM {alias}.{table} WHERE run_id IN ({which})",
            params,
        )


def conflicts_by_run(
    con: duckdb.DuckDBPyConnection, alias: str, what: str = "shard"
) -> dict[str, list[str]]:
    """What merging the attached file ``alias`` (called ``what`` in the phrases) would lose,
    per run id: a stored run it holds less finished (see ``FINISHED``), or result rows
    (repeats) of a stored run it lacks; one phrase each. Runs that lose nothing are absent."""
    stored = con.execute(
        f"SELECT d.run_id, d.status, s.status FROM runs AS d JOIN {alias}.runs AS s "
        "USING (run_id) ORDER BY 1"
    ).fetchall()
    lost = dict(
        con.execute(
            f"SELECT d.run_id, list(d.repeat ORDER BY d.repeat) FROM results AS d "
            f"WHERE d.run_id IN (SELECT run_id FROM {alias}.runs) AND NOT EXISTS "
            f"(SELECT 1 FROM {alias}.results AS s WHERE s.run_id = d.run_id "
            "AND s.repeat = d.repeat) GROUP BY d.run_id"
        ).fetchall()
    )
    found: dict[str, list[str]] = {}
    for run_id, ours, theirs in stored:
        if ours != theirs and FINISHED.get(theirs, -1) < FINISHED.get(ours, len(FINISHED)):
            found.setdefault(run_id, []).append(
                f"run {run_id} is stored {ours}, the {what} has it {theirs} (less finished)"
            )
        if run_id in lost:
            repeats = lost[run_id]
            found.setdefault(run_id, []).append(
                f"the {what} lacks {len(repeats)} result row(s) of run {run_id} that the "
                f"database holds (repeat(s) {', '.join(map(str, repeats))})"
            )
    return found
