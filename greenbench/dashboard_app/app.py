"""The greenbench dashboard (Streamlit script): sidebar filters, then one tab per view.

Run with ``greenbench dashboard --db PATH`` or ``streamlit run dashboard/app.py -- --db PATH``
(``$GREENBENCH_DB`` works too). The dashboard only reads; each query opens the database
read-only and closes it, so runs can write to the same file meanwhile. Tabs are addressable by
URL (``?view=Pareto``) and only the open one is computed. The leaderboard and Pareto rank
training runs only; simulated and emulated-GPU runs (modelled energy) and a user's own
measurements are shown apart (`apart_views`), and Run detail and History open every kind. Runs
to a target loss have the Quality tab (`quality_views`) and the Pareto view's "energy to target"
axis, on which runs that skip stages per token are ranked too. Communication-efficient data
parallelism against DDP has the Communication tab (`comm_views`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import streamlit as st

from greenbench.dashboard_app import (
    apart_views,
    board_views,
    comm_views,
    compare_views,
    data,
    detail_views,
    power_views,
    quality_views,
)
from greenbench.dashboard_app.filters import apply_filters, sidebar
from greenbench.errors import StoreError
from greenbench.reporting.leaderboard import leaderboard, skipping_board

TABS = (
    "Leaderboard", "Pareto", "Run detail", "History", "Comparisons", "Quality",
    "Communication", "Own measurements", "Power limits",
)  # fmt: skip
CREATE_CMD = "greenbench run --suite smoke --db {db}"


def store_problem(db: Path, exc: StoreError) -> None:
    """A writer held the file through every retry: say so, offer a retry, do not crash.
    Any other StoreError (not a DuckDB file, unreadable) is shown as the error it is."""
    if not data.is_busy(exc):
        st.error(f"Cannot read the results database: {exc}")
        st.button("Retry now", on_click=data.clear_cache, key="retry_error")
        return
    st.warning(
        f"The results database `{db}` is busy: another process (most likely a `greenbench run`) "
        f"holds its write lock. Retried for {data.retry_budget_s():.1f} s. The dashboard never "
        "writes and will read again as soon as the run releases the file."
    )
    st.caption(f"Details: {exc}")
    st.button("Retry now", on_click=data.clear_cache, key="retry_busy")


def empty_state(db: Path, status: data.DbStatus) -> None:
    if status.state == "missing":
        st.info(f"No results database at `{db}` yet. Create results with:")
    elif status.state == "not-greenbench":
        st.warning(
            f"`{db}` is a DuckDB file without greenbench's tables (runs, results). "
            "Point `--db` at a results database, or create one with:"
        )
    else:
        extra = (
            f" ({status.n_running} running, {status.n_failed} failed or interrupted)"
            if status.n_running or status.n_failed
            else ""
        )
        st.info(f"`{db}` holds no successful run yet{extra}. Create results with:")
    st.code(CREATE_CMD.format(db=db), language="bash")
    st.caption("Then reload this page. `greenbench list workloads` shows what can be run.")
    st.button("Reload", on_click=data.clear_cache, key="reload_empty")


def sidebar_status(db: Path, status: data.DbStatus) -> None:
    st.sidebar.divider()
    st.sidebar.caption(
        f"Database `{db}`: {status.n_ok} successful runs"
        + (f", {status.n_running} running" if status.n_running else "")
        + (f", {status.n_failed} failed or interrupted" if status.n_failed else "")
        + f". Read-only; refreshed every {data.CACHE_TTL_S:.0f} s."
    )
    st.sidebar.button("Reload data", on_click=data.clear_cache, key="reload")


def main() -> None:
    st.set_page_config(page_title="greenbench leaderboard", page_icon="🌱", layout="wide")
    db = data.resolve_db_path(sys.argv, os.environ)
    st.header("greenbench: joules per token against tokens/s")
    try:
        status = data.status(db)
        if status.state != "ok":
            empty_state(db, status)
            return
        repeats = data.repeats(db)
    except StoreError as exc:
        store_problem(db, exc)
        return
    filters = sidebar(repeats)
    sidebar_status(db, status)
    filtered = apply_filters(repeats, filters)
    board = leaderboard(filtered, filters.scope)  # training runs only
    skipping = skipping_board(filtered, filters.scope)  # partial-model runs: their own question
    modelled = apart_views.modelled_board(filtered, filters.scope)  # simulated, emulated
    own = apart_views.own_board(filtered, filters.scope)  # greenbench measure, own loops
    apart = pd.concat([t for t in (modelled, own) if len(t)] or [modelled])
    tabs = st.tabs(TABS, key="view", on_change="rerun", bind="query-params")
    views = {
        "Leaderboard": lambda: board_views.leaderboard_view(db, board),
        "Pareto": lambda: board_views.pareto_view(
            db, board, lambda: quality_views.target_pareto_view(db, filters)
        ),
        "Run detail": lambda: detail_views.run_detail_tab(db, board, apart),
        "History": lambda: detail_views.history_tab(filtered, board, apart),
        "Comparisons": lambda: compare_views.comparisons_tab(db, board, modelled, skipping),
        "Quality": lambda: quality_views.quality_tab(db, filters),
        "Communication": lambda: comm_views.comm_tab(db),
        "Own measurements": lambda: apart_views.own_measurements_tab(db, own),
        "Power limits": lambda: power_views.power_limits_tab(db),
    }
    for name, tab in zip(TABS, tabs, strict=True):
        if not tab.open:
            continue
        with tab:
            try:
                views[name]()
            except StoreError as exc:
                store_problem(db, exc)


if __name__ == "__main__":
    main()
