"""Opening the results database: refusing foreign files, retrying while another process holds
the lock, and read-only queries that open, read and close; refusing damaged files before anything
is spent on them (every block read), and where a database's result shards go."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from greenbench.errors import StoreError

if TYPE_CHECKING:
    import pandas as pd  # DuckDB imports it where a frame is read (.df())

_JSON_COLUMNS = ("config", "hardware", "versions", "step_times_s", "warnings", "kernels")
_DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB database file

T = TypeVar("T")


class DatabaseLocked(StoreError):
    """Another process held the results database for longer than the caller would wait."""


class FileRefused(StoreError):
    """A file refused as a results database. The message names it as the database; ``kind``
    (``unreadable``, ``not-duckdb``, ``unopenable``, ``unwritable``, ``foreign``, ``newer``,
    ``damaged``) and ``reason`` (why, without the path or the advice) let a caller that opens
    the file as something else, a result shard, say so in its own words."""

    def __init__(self, message: str, *, kind: str, reason: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.reason = reason


def _is_lock_error(exc: duckdb.Error) -> bool:
    # another process holds the file (IOException "Could not set lock"), or this process has it
    # open with another configuration (ConnectionException "different configuration")
    return isinstance(exc, duckdb.ConnectionException) or "lock" in str(exc).lower()


def _check_duckdb_file(path: Path) -> None:
    """Refuse, without opening it, a file that is not a DuckDB database."""
    try:
        with path.open("rb") as f:
            head = f.read(12)
    except OSError as exc:
        raise FileRefused(
            f"cannot read results database {path}: {exc.strerror}",
            kind="unreadable",
            reason=str(exc.strerror),
        ) from None
    if len(head) < 12 or head[8:12] != _DUCKDB_MAGIC:
        raise FileRefused(
            f"{path} is not a DuckDB database (so not a greenbench results file); "
            "pass another --db path",
            kind="not-duckdb",
            reason="empty" if not head else "no DuckDB header in its first bytes",
        )


def _connect(
    path: Path,
    *,
    read_only: bool,
    timeout_s: float,
    delay_s: float = 0.05,
    on_wait: Callable[[float], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open ``path``, retrying with backoff for ``timeout_s`` while another process holds it;
    ``on_wait(seconds waited so far)`` is called before each retry (a progress display)."""
    start = time.monotonic()
    deadline = start + timeout_s
    delay = delay_s
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            if not _is_lock_error(exc):
                raise FileRefused(
                    f"cannot open results database {path}: {exc}",
                    kind="unopenable",
                    reason=_first_line(exc),
                ) from None
            if time.monotonic() + delay > deadline:
                raise DatabaseLocked(
                    f"{path} is locked by another process (is a `greenbench run` writing to it, "
                    "or a dashboard, export or notebook holding a connection?)"
                ) from None
        if on_wait is not None:
            on_wait(time.monotonic() - start)
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _read(
    path: Path,
    fn: Callable[[duckdb.DuckDBPyConnection], T],
    timeout_s: float,
    delay_s: float = 0.05,
) -> T:
    """Open read-only, run ``fn`` on the connection, close; DuckDB errors become StoreError."""
    if not path.exists():
        raise StoreError(f"no results database at {path}: run `greenbench run --suite smoke` first")
    _check_duckdb_file(path)
    con = _connect(path, read_only=True, timeout_s=timeout_s, delay_s=delay_s)
    try:
        return fn(con)
    except duckdb.CatalogException as exc:
        raise StoreError(f"{path} is not a greenbench results database ({exc})") from None
    except duckdb.Error as exc:
        raise StoreError(f"query on {path} failed: {exc}") from None
    finally:
        con.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def read_every_table(con: duckdb.DuckDBPyConnection) -> None:
    """Read every column of every row of every table, so that DuckDB checks the checksum of
    every data block (a corrupt block or a truncated file raises here; hashing the whole row
    keeps the rows out of Python and no column can be skipped)."""
    for (table,) in con.execute("SHOW TABLES").fetchall():
        con.execute(f'SELECT count(*), bit_xor(hash(t)) FROM "{table}" AS t').fetchall()


#: the tables that hold a run's rows (every one has a run_id column): runs and its children
RUN_TABLES_SQL = (
    "SELECT DISTINCT table_name FROM duckdb_columns() WHERE column_name = 'run_id' "
    "AND database_name = current_database() AND schema_name = 'main' ORDER BY table_name"
)
_PROBE_RUN_ID = "~greenbench-probe~"  # never a real run id (those are hex)


def verify_file(
    path: Path,
    *,
    read_timeout_s: float,
    write_timeout_s: float,
    on_wait: Callable[[float], None] | None = None,
) -> None:
    """Refuse a damaged database before anything is spent on it, leaving the file as it was.

    Reads every data block (DuckDB checks each block's checksum as it reads it), then makes a
    write that is rolled back, which reads the index blocks the key constraints use (a
    rolled-back transaction writes nothing to the file). A truncated file or a corrupt block is
    a StoreError of one line; a file another process holds past ``write_timeout_s`` is
    ``DatabaseLocked``."""

    def damaged(exc: duckdb.Error) -> StoreError:
        reason = f"truncated, or a corrupt block: {_first_line(exc)}"
        return FileRefused(
            f"{path} is damaged ({reason}); refusing to use it, "
            "the file was left unchanged: restore it from a copy, or pass another --db",
            kind="damaged",
            reason=reason,
        )

    con = _connect(path, read_only=True, timeout_s=read_timeout_s)
    try:
        read_every_table(con)
        tables = [t for (t,) in con.execute(RUN_TABLES_SQL).fetchall()]
    except duckdb.Error as exc:
        raise damaged(exc) from None
    finally:
        con.close()
    con = _connect(path, read_only=False, timeout_s=write_timeout_s, on_wait=on_wait)
    try:
        con.begin()
        try:
            for table in tables:
                con.execute(
                    f"INSERT INTO {table} SELECT * REPLACE ('{_PROBE_RUN_ID}' AS run_id) "
                    f"FROM {table} LIMIT 1"
                )
        finally:
            con.rollback()
    except duckdb.Error as exc:
        raise damaged(exc) from None
    finally:
        con.close()


def shard_dir(db_path: str | Path) -> Path:
    """The folder of a database's result shards: ``<db>.shards/`` beside it (see ``shards``)."""
    db = Path(db_path)
    return db.with_name(db.name + ".shards")


def ready_shard_dir(db_path: str | Path) -> Path:
    """Create (if needed) the shard folder and check it can be written, or StoreError."""
    folder = shard_dir(db_path)
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create shard folder {folder}: {exc.strerror}") from None
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise StoreError(f"shard folder {folder} is not a writable folder")
    return folder


def _fetch_dicts(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    for row in rows:
        for col in _JSON_COLUMNS:
            if isinstance(row.get(col), str):
                row[col] = json.loads(row[col])
    return rows


def read_frame(
    db_path: str | Path,
    sql: str,
    params: list[Any] | None = None,
    *,
    retries: int = 20,
    backoff_s: float = 0.05,
) -> pd.DataFrame:
    """Run one read-only query and close the connection; retry while a writer holds the file.

    The wait before giving up is what ``retries`` waits of ``backoff_s`` growing ×1.5 (each
    capped at 0.5 s) add up to: about 8 s with the defaults. Any failure is a StoreError.
    """
    timeout_s = sum(min(backoff_s * 1.5**i, 0.5) for i in range(retries))

    def query(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
        return con.execute(sql, params or []).df()

    return _read(Path(db_path), query, timeout_s, delay_s=backoff_s)
