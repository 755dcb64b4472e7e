"""DuckDB storage of runs and results: schema, migrations, writes, queries.

One file, one writer (the launcher), short transactions; readers (dashboard, compare, report)
open read-only per query and close, so that a run can write while they are open.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from greenbench.errors import StoreError


def read_frame(
    db_path: str | Path,
    sql: str,
    params: list[Any] | None = None,
    *,
    retries: int = 20,
    backoff_s: float = 0.05,
) -> pd.DataFrame:
    """Run one read-only query and close the connection; retry while a writer holds the file."""
    path = Path(db_path)
    if not path.exists():
        raise StoreError(f"no results database at {path}: run `greenbench run --suite smoke` first")
    last: Exception | None = None
    for attempt in range(retries):
        try:
            con = duckdb.connect(str(path), read_only=True)
        except duckdb.IOException as exc:  # a writer holds the lock
            last = exc
            time.sleep(backoff_s * (1.5**attempt))
            continue
        try:
            return con.execute(sql, params or []).df()
        finally:
            con.close()
    raise StoreError(f"{path} stayed locked by another writer: {last}")
