"""What every workload section of a report reads first: the ok repeats of stored runs with the
columns it asks for, and the newest run of each configuration with its energy label."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from greenbench.store import read_frame
from greenbench.store.views import RESULT_TABLE_COLUMNS, RUNS_COLUMNS, ok_repeats_sql
from greenbench.vocabulary import energy_label


def read_repeats(db_path: str | Path, columns: Sequence[str]) -> pd.DataFrame:
    """One row per repeat of every ok run, with ``columns``; a column the database does not
    have yet (an older schema) reads as missing values."""
    known = set(read_frame(db_path, RUNS_COLUMNS)["column_name"]) | {
        c
        for c in read_frame(db_path, RUNS_COLUMNS.replace("'runs'", "'results'"))["column_name"]
        if c in RESULT_TABLE_COLUMNS
    }
    rows = read_frame(db_path, ok_repeats_sql([c for c in columns if c in known]))
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
