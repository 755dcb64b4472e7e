"""The sidebar filters and their (pure) application to the per-repeat rows.

Filters act on repeats before aggregation, so every view (leaderboard, Pareto, comparisons)
sees the same subset. An empty multiselect means "all". Runs stored contended (the machine was
shared) are shown, marked, unless the user hides them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from greenbench.vocabulary.trust import CONTENDED, flagged

NO_SUITE = "(no suite)"


@dataclass(frozen=True, slots=True)
class Filters:
    suites: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    hardware: tuple[str, ...] = ()
    strategies: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    measured_only: bool = False
    hide_contended: bool = False  # leave out the repeats of runs that shared the machine
    scope: str = "latest"  # "latest": the newest version (git sha and label); "all": pool all


def model_label(rows: pd.DataFrame) -> pd.Series:
    return rows["model_family"].astype(str) + "/" + rows["model_size"].astype(str)


def suite_label(rows: pd.DataFrame) -> pd.Series:
    return rows["suite"].fillna(NO_SUITE).astype(str)


def apply_filters(rows: pd.DataFrame, f: Filters) -> pd.DataFrame:
    """The repeats that pass every filter."""
    keep = pd.Series(True, index=rows.index)
    for values, column in (
        (f.suites, suite_label(rows)),
        (f.workloads, rows["workload"]),
        (f.hardware, rows["device_type"]),
        (f.strategies, rows["strategy"]),
        (f.models, model_label(rows)),
    ):
        if values:
            keep &= column.isin(values)
    if f.measured_only:
        keep &= rows["energy_measured"].astype(bool)
    if f.hide_contended and "contended" in rows:
        keep &= ~rows["contended"].map(flagged).astype(bool)
    return rows[keep]


def _options(column: pd.Series) -> list[str]:
    return sorted({str(v) for v in column.dropna()})


def sidebar(rows: pd.DataFrame) -> Filters:
    """Render the filter widgets and return the chosen filters."""
    st.sidebar.header("Filters")
    ms = st.sidebar.multiselect
    filters = Filters(
        suites=tuple(ms("Suite", _options(suite_label(rows)), key="f_suite")),
        workloads=tuple(ms("Workload", _options(rows["workload"]), key="f_workload")),
        hardware=tuple(ms("Hardware", _options(rows["device_type"]), key="f_hardware")),
        strategies=tuple(ms("Strategy", _options(rows["strategy"]), key="f_strategy")),
        models=tuple(ms("Model", _options(model_label(rows)), key="f_model")),
        measured_only=st.sidebar.checkbox(
            "Measured energy only",
            key="f_measured",
            help="Hide configurations whose energy is an estimate (TDP × utilisation model).",
        ),
        hide_contended=st.sidebar.checkbox(
            "Hide contended runs",
            key="f_contended",
            help=f"Leave out runs marked {CONTENDED}: measured while other processes (or another "
            "greenbench run) shared the machine, so their figures may be skewed.",
        ),
        scope=st.sidebar.radio(
            "Repeats pooled per configuration",
            ["latest", "all"],
            format_func={"latest": "newest version only", "all": "every stored run"}.get,
            key="f_scope",
            help="Newest version: the runs of the git sha and label of each configuration's "
            "most recent run (runs under another label, or of another commit, are in History).",
        ),
    )
    return filters
