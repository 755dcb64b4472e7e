"""Runs kept off the training leaderboard and its Pareto front, each shown apart and labelled.

- **Modelled energy**: simulated runs (SkipPipe's discrete-event simulator, energy
  "simulated (model)") and runs on emulated GPUs (energy "emulated (GPU power model)"). No
  meter was read: their figures are a model's. Comparisons lists them in a "Simulated, not
  measured" section under their workload's question; Run detail and History open them, labelled.
- **Own measurements**: a user's own loop (``greenbench.measure``, strategy ``own-loop``) or a
  whole command (``greenbench measure -- CMD``, strategy ``whole-process``): measured, but not
  training windows of greenbench's workloads (a whole process includes its start-up), so they
  have a tab of their own ("Own measurements"), never a rank on the leaderboard.

Both are pooled exactly as the leaderboard pools its rows (one row per configuration and energy
source, medians over the repeats of the newest commit, the trust model's columns), so Run
detail and History read them like any configuration.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from greenbench.dashboard_app import data, marking
from greenbench.reporting import leaderboard as lb
from greenbench.vocabulary import OWN_MEASUREMENT_KINDS, trust

SIMULATED_WARNING = (
    "**Simulated, not measured.** No meter was read: energy is a model's (a simulated run's "
    "busy and idle seconds at assumed watts, or an emulated GPU's power model), and a simulated "
    "run's time is the simulator's. These rows are never on the leaderboard or the Pareto front; "
    "compare them only with each other."
)
OWN_NOTE = (
    "Your own measurements: a training loop measured with `greenbench.measure` (own loop) or a "
    "whole command measured with `greenbench measure -- CMD` (whole process: its start-up, data "
    "loading and evaluation included, so not a training window). They are measured, but not "
    "greenbench workloads, so they are listed here, never ranked on the leaderboard."
)
OWN_EMPTY = (
    "No own measurement is stored. `greenbench measure --name NAME -- CMD` measures a command; "
    "`greenbench.measure` in your own loop measures its steps."
)


def modelled_board(rows: pd.DataFrame, scope: str) -> pd.DataFrame:
    """The simulated and emulated-GPU runs among ``rows``, pooled (`lb.modelled_runs`)."""
    return lb.modelled_runs(rows, scope)


def own_board(rows: pd.DataFrame, scope: str) -> pd.DataFrame:
    """A user's own measurements among ``rows``, pooled (`lb.own_measurements`)."""
    return lb.own_measurements(rows, scope)  # type: ignore[arg-type]


def kind_tag(row: pd.Series) -> str:
    """ "simulated", "emulated", "own measurement" or "" (a training run), for labels."""
    kind = trust.energy_kind(row.get("energy_source"), row.get("energy_measured"))
    if kind in ("simulated", "emulated"):
        return kind
    if row.get("strategy") in lb.OWN_MEASUREMENT_STRATEGIES:
        return "own measurement"
    return ""


def modelled_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Modelled configurations as shown: every figure's heading says it is a model's
    (``sim.``: the simulator's time; the iteration time is the median step's)."""
    return pd.DataFrame(
        {
            "configuration": rows["config_name"],
            "energy": rows["energy"],
            "J/token (model)": rows["joules_per_token"],
            "tokens/s (sim.)": rows["tokens_per_s"],
            "iteration s (sim.)": rows["step_time_p50_s"],
            "devices": rows["devices"].map(marking.text_cell) + " × " + rows["device_type"],
            "repeats": rows["n_repeats"],
            "trust": rows["trust"],
        }
    ).reset_index(drop=True)


def modelled_section(rows: pd.DataFrame, key: str) -> None:
    """The modelled configurations of one question, apart, under a warning saying so."""
    st.markdown(f"#### Simulated, not measured ({len(rows)})")
    st.warning(SIMULATED_WARNING)
    table = modelled_table(rows)
    measured = pd.Series(True, index=table.index)  # headings say "model": no "(est.)" marks
    st.dataframe(
        marking.style_marked(table, measured, ()),
        hide_index=True,
        placeholder=marking.MISSING,
        key=key,
    )
    st.caption("Open one in Run detail or History: it is listed there, labelled simulated.")


def _energy_and_time(db: Path, run_id: str) -> tuple[float, float]:
    """Median energy (J) and seconds of one run's repeats (NaN when none)."""
    res = data.run_results(db, run_id)
    if res.empty:
        return float("nan"), float("nan")
    energy = pd.to_numeric(res["energy_j"], errors="coerce").median()
    return float(energy), float(pd.to_numeric(res["seconds"], errors="coerce").median())


def own_table(db: Path, own: pd.DataFrame) -> pd.DataFrame:
    """The own measurements as shown: what each measured, its energy and time beside the
    per-token figures (a whole process has no tokens: those read "–")."""
    figures = [_energy_and_time(db, str(r)) for r in own["latest_run_id"]]
    return pd.DataFrame(
        {
            "name": own["config_name"],
            "what": own["strategy"].map(OWN_MEASUREMENT_KINDS).fillna(own["strategy"]),
            "energy": own["energy"],
            "energy (J)": [e for e, _ in figures],
            "time (s)": [t for _, t in figures],
            "J/token": own["joules_per_token"].where(own["tokens_per_s"] > 0),
            "tokens/s": own["tokens_per_s"].where(own["tokens_per_s"] > 0),
            "mem MiB": own["peak_mem_bytes"] / 2**20,
            "devices": own["devices"].map(marking.text_cell) + " × " + own["device_type"],
            "repeats": own["n_repeats"],
            "trust": own["trust"],
            "git sha": own["git_sha"].map(marking.text_cell).str[:10],
        }
    ).reset_index(drop=True)


def own_measurements_tab(db: Path, own: pd.DataFrame) -> None:
    st.subheader("Own measurements")
    st.caption(OWN_NOTE)
    if own.empty:
        st.info(OWN_EMPTY)
        st.dataframe(
            pd.DataFrame(columns=["name", "what", "energy"]),
            hide_index=True,
            placeholder=marking.MISSING,
        )
        return
    labelled = marking.with_labels(own)
    table = own_table(db, labelled)
    st.dataframe(
        marking.style_marked(table, labelled["energy_measured"], ("energy (J)", "J/token")),
        hide_index=True,
        placeholder=marking.MISSING,
        key="own_table",
    )
    st.caption(
        marking.interval_note(own["n_repeats"]) + " Open one in Run detail or History: it is "
        "listed there, labelled own measurement."
    )
