"""Opening the results database: refusing foreign files, retrying while another process holds
the lock, and read-only queries that open, read and close."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pandas as pd

from greenbench.errors import StoreError

_JSON_COLUMNS = ("config", "hardware", "versions", "step_times_s", "warnings", "kernels")
_DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB database file

T = TypeVar("T")


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
        raise StoreError(f"cannot read results database {path}: {exc.strerror}") from None
    if len(head) < 12 or head[8:12] != _DUCKDB_MAGIC:
        raise StoreError(
            f"{path} is not a DuckDB database (so not a greenbench results file); "
            "pass another --db path"
        )


def _connect(
    path: Path, *, read_only: bool, timeout_s: float, delay_s: float = 0.05
) -> duckdb.DuckDBPyConnection:
    """Open ``path``, retrying with backoff for ``timeout_s`` while another process holds it."""
    deadline = time.monotonic() + timeout_s
    delay = delay_s
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            if not _is_lock_error(exc):
                raise StoreError(f"cannot open results database {path}: {exc}") from None
            if time.monotonic() + delay > deadline:
                raise StoreError(
                    f"{path} is locked by another process (is a `greenbench run` writing to it?)"
                ) from None
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
