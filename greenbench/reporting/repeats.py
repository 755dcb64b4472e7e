"""What every workload section of a report reads first: the ok repeats of stored runs with the
columns it asks for, and the newest run of each configuration with its energy label."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from greenbench.store import read_frame
from greenbench.store.views import (
    MFU_COLUMNS,
    RESULT_TABLE_COLUMNS,
    STORED_COLUMNS,
    ok_repeats_sql,
)
from greenbench.vocabulary import energy_label


def stored_columns(db_path: str | Path) -> set[str]:
    """The columns a repeat row can take from this database (``runs`` and ``results``)."""
    return columns_of(read_frame(db_path, STORED_COLUMNS))


def columns_of(frame: pd.DataFrame) -> set[str]:
    """`stored_columns` from the answer to ``views.STORED_COLUMNS``."""
    known = {
        c
        for t, c in zip(frame["table_name"], frame["column_name"], strict=True)
        if t == "runs" or c in RESULT_TABLE_COLUMNS
    }
    if "mfu_note" in known:  # MFU read against the machine's peak (`greenbench.store.views`)
        known |= MFU_COLUMNS
    return known


def read_repeats(
    db_path: str | Path,
    columns: Sequence[str],
    match: str | None = None,
    value: str | None = None,
    known: set[str] | None = None,
) -> pd.DataFrame:
    """One row per repeat of every ok run (or of those ``match``, a `views.MATCHES` name, names
    by ``value``), with ``columns``; a column the database does not have yet (an older schema)
    reads as missing values. ``known``: `stored_columns`, when the caller has read them."""
    known = stored_columns(db_path) if known is None else known
    sql = ok_repeats_sql([c for c in columns if c in known], match)
    rows = read_frame(db_path, sql, [] if match is None else [value])
    for column in columns:
        if column not in rows:
            rows[column] = None
    return rows


def newest_runs(rows: pd.DataFrame) -> pd.DataFrame:
    """The repeats of each configuration's newest run, with an ``energy`` label column."""
    newest = rows.sort_values("started_at").groupby("config_key")["run_id"].last()
    rows = rows[rows["run_id"].isin(set(newest))].copy()
    rows["energy"] = [
        energy_label(s, m) for s, m in zip(rows.energy_source, rows.energy_measured, strict=True)
    ]
    return rows
