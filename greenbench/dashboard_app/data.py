"""Read-only, cached access to the results database for the dashboard. Never writes.

Every query goes through :func:`greenbench.store.read_frame`, which opens DuckDB read-only, runs
one statement and closes, so a `greenbench run` can write to the same file while the dashboard is
open (DuckDB allows one writer process, and an open reader would block it). Answers are cached
per (file, query) for a few seconds. While a writer holds the file the read retries for about
two seconds and then raises :class:`~greenbench.errors.StoreError`; the app turns that into a
"database busy" message rather than a crash (and any other StoreError into its message).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from greenbench.errors import StoreError
from greenbench.reporting.leaderboard import (
    HISTORY_COLUMNS,
    LATER_METRICS,
    POOL_COLUMNS,
    REPEAT_COLUMNS,
    TRUST_COLUMNS,
)
from greenbench.reporting.repeats import columns_of
from greenbench.store import read_frame, views

CACHE_TTL_S = 5.0
READ_RETRIES = 6  # waits of READ_BACKOFF_S growing ×1.5 (≤ 0.5 s each): ~1.8 s in all
READ_BACKOFF_S = 0.1
DEFAULT_DB = "greenbench.duckdb"


def retry_budget_s() -> float:
    """How long a read keeps retrying while a writer holds the file, in seconds (the schedule
    of :func:`greenbench.store.read_frame`: waits growing ×1.5, each at most 0.5 s)."""
    return sum(min(READ_BACKOFF_S * 1.5**i, 0.5) for i in range(READ_RETRIES))


def is_busy(exc: StoreError) -> bool:
    """Whether a StoreError means "another process holds the file" (worth a retry) rather
    than a file that cannot be read at all."""
    return "locked" in str(exc).lower()


def resolve_db_path(argv: list[str], environ: Mapping[str, str]) -> Path:
    """The database file: ``--db PATH`` after ``--`` on the streamlit command line, else
    ``$GREENBENCH_DB``, else ``./greenbench.duckdb``."""
    if "--db" in argv:
        i = argv.index("--db")
        if i + 1 < len(argv):
            return Path(argv[i + 1])
    return Path(environ.get("GREENBENCH_DB", DEFAULT_DB))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _query(db_path: str, sql: str, params: tuple[Any, ...] = ()) -> pd.DataFrame:
    # exceptions are not cached, so a busy database is asked again on the next rerun
    return read_frame(db_path, sql, list(params), retries=READ_RETRIES, backoff_s=READ_BACKOFF_S)


def clear_cache() -> None:
    _query.clear()


@dataclass(frozen=True, slots=True)
class DbStatus:
    """What the file holds: ``state`` is missing | not-greenbench | empty | ok."""

    state: str
    n_ok: int = 0
    n_running: int = 0
    n_failed: int = 0


def status(db_path: Path) -> DbStatus:
    """Classify the database file, counting runs per status (raises StoreError when busy)."""
    if not db_path.exists():
        return DbStatus("missing")
    tables = _query(str(db_path), views.TABLE_NAMES)
    if not {"runs", "results"} <= set(tables["table_name"]):
        return DbStatus("not-greenbench")
    counts = _query(str(db_path), views.STATUS_COUNTS)
    by_status = dict(zip(counts["status"], counts["n"], strict=True))
    ok = int(by_status.get("ok", 0))
    running = int(by_status.get("running", 0))
    failed = int(sum(n for s, n in by_status.items() if s not in ("ok", "running")))
    return DbStatus("ok" if ok else "empty", ok, running, failed)


def repeats(db_path: Path) -> pd.DataFrame:
    """One row per repeat of every successful run: `leaderboard.REPEAT_COLUMNS`, and the later
    metrics, the seed group the leaderboard pools seeds by, the label and git branch history is
    drawn by and the trust model's columns (`leaderboard.LATER_METRICS`, `POOL_COLUMNS`,
    `HISTORY_COLUMNS`, `TRUST_COLUMNS`) where the database has them
    (an older one, opened read-only and never migrated here, lacks some: they read as unknown,
    and each configuration is a seed group of its own)."""
    known = columns_of(_query(str(db_path), views.STORED_COLUMNS))
    later = (*LATER_METRICS, *POOL_COLUMNS, *HISTORY_COLUMNS, *TRUST_COLUMNS)
    columns = [*REPEAT_COLUMNS, *(c for c in later if c in known)]
    return _query(str(db_path), views.ok_repeats_sql(columns))


def runs_of(db_path: Path, config_key: str) -> pd.DataFrame:
    """Every run (any status) of one configuration, newest first."""
    return _query(str(db_path), views.RUNS_OF_CONFIG, (config_key,))


def _reads_mfu_notes(db_path: Path) -> bool:
    """Whether the database has the MFU notes (schema version 4 on) that reading MFU against
    the machine's peak needs (`greenbench.store.views`); an older one is read as stored."""
    return "mfu_note" in columns_of(_query(str(db_path), views.STORED_COLUMNS))


def run_record(db_path: Path, run_id: str) -> dict[str, Any] | None:
    """The `runs` row of one run as a dict, or None; with whether its MFU peak agrees with its
    machine's (`views.PEAK_COLUMNS`) where the database can tell."""
    df = _query(str(db_path), views.RUN_RECORD, (run_id,))
    if df.empty:
        return None
    record = df.iloc[0].to_dict()
    if _reads_mfu_notes(db_path):
        peak = _query(str(db_path), views.RUN_PEAK, (run_id,))
        record |= peak.iloc[0].to_dict() if len(peak) else {}
    return record


def run_results(db_path: Path, run_id: str) -> pd.DataFrame:
    """Every repeat of one run, MFU read against its machine's peak under both conventions
    (as stored in a database older than the MFU notes; PaLM's alone in one older than the
    causal count)."""
    known = columns_of(_query(str(db_path), views.STORED_COLUMNS))
    if "mfu_note" not in known:
        sql = views.RUN_RESULTS_AS_STORED
    elif views.CAUSAL_MFU in known:
        sql = views.RUN_RESULTS
    else:
        sql = views.RUN_RESULTS_BEFORE_CAUSAL
    return _query(str(db_path), sql, (run_id,))


def rank_results(db_path: Path, run_id: str) -> pd.DataFrame:
    """Per-rank rows of one run."""
    return _query(str(db_path), views.RANK_RESULTS, (run_id,))


def run_events(db_path: Path, run_id: str) -> pd.DataFrame:
    """One run's events (checkpoints, failures, restarts, work redone), in order; empty where
    it has none or the database keeps none (a schema from before them)."""
    if "run_events" not in set(_query(str(db_path), views.TABLE_NAMES)["table_name"]):
        return pd.DataFrame()
    return _query(str(db_path), views.RUN_EVENTS, (run_id,))


def power_samples(db_path: Path, run_id: str) -> pd.DataFrame:
    """The power time series of one run (empty when the meter sampled none)."""
    return _query(str(db_path), views.POWER_SAMPLES, (run_id,))
