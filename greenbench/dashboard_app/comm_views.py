"""The dashboard's Communication tab: communication-efficient data parallelism against DDP, as
the report's section shows it (`greenbench.reporting.comm_efficient` reads and computes,
`greenbench.reporting.sections.comm_efficient` words the cells and the findings).

One table of method × rank count × link (bytes per step and rank, × fewer than DDP, step time
and its ratio to DDP, waiting, J/token with its energy label), one of energy and time to a
target loss per method over seeds (a method that did not reach it shown by each seed's best
loss), and the chart "bytes per step against energy to target": medians over seeds with their
interval, a method whose median seed did not reach drawn hollow at the energy its budget spent.
The sidebar's filters do not apply: the tab reads the two workloads' runs whole.
"""

from __future__ import annotations

from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from greenbench.dashboard_app import data, marking
from greenbench.dashboard_app.quality_charts import interval_ends
from greenbench.reporting.comm_efficient import DDP, read_methods, read_targets, with_bytes
from greenbench.reporting.sections.comm_efficient import (
    bytes_findings,
    bytes_text,
    fewer_text,
    speed_findings,
    target_findings,
    target_lines,
)
from greenbench.reporting.to_target import LABELS, seeds_caption

EMPTY = (
    "No communication-efficient run yet. `greenbench run --suite comm-efficient` measures each "
    "method's bytes and step time against DDP; `greenbench run --suite convergence` trains "
    "DDP, PowerSGD, local SGD and DiLoCo to a target loss."
)
COLUMNS = (
    "ranks", "link", "method", "bytes/step/rank", "vs DDP", "step time (ms)", "× DDP",
    "waiting", "J/token", "energy",
)  # fmt: skip
#: how a point is drawn: reached (filled, its interval over seeds) or not (hollow, at its budget)
REACHED, MISSED = "reached (median seed)", "not reached: energy its budget spent"


@st.cache_data(ttl=data.CACHE_TTL_S, show_spinner=False)
def _methods(db_path: str) -> pd.DataFrame:
    return read_methods(db_path)


@st.cache_data(ttl=data.CACHE_TTL_S, show_spinner=False)
def _targets(db_path: str) -> pd.DataFrame:
    return read_targets(db_path)


def table(methods: pd.DataFrame) -> pd.DataFrame:
    """One row per rank count, link and method (`COLUMNS`); an estimate's J/token marked."""
    rows = [
        [
            int(r["nproc"]), r["link"], r["method"], bytes_text(r["bytes_per_step"]),
            "" if r["method"] == DDP else fewer_text(r["bytes_fewer"]), r["step_s"] * 1000,
            r["step_ratio"], r["wait_share"],
            marking.mark(f"{r['joules_per_token']:.4g}", bool(r["energy_measured"]))
            if pd.notna(r["joules_per_token"]) else marking.MISSING,
            r["energy"],
        ]
        for _, r in methods.iterrows()
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))


def chart_points(targets: pd.DataFrame) -> pd.DataFrame:
    """The chart's points: each method with bytes per step, drawn at its median energy to
    target (``value``, interval ``low``–``high``) where it reached, else at ``budget_j``."""
    points = interval_ends(targets, "energy_to_target_j")
    missed = ~np.isfinite(points["value"].astype(float))
    points["y"] = points["value"].where(~missed, points["budget_j"])
    points["drawn"] = np.where(missed, MISSED, REACHED)
    points["label"] = points["method"] + " ×" + points["devices"].astype(int).astype(str)
    bytes_ok = np.isfinite(pd.to_numeric(points["bytes_per_step"], errors="coerce"))
    return points[bytes_ok & np.isfinite(points["y"].astype(float))]


def bytes_energy_chart(points: pd.DataFrame) -> alt.LayerChart:
    """Bytes per step (x, log) against energy to target (y): filled points with their interval
    over seeds where the median seed reached, hollow ones at the budget's energy where not."""
    kinds = " / ".join(sorted(set(points["energy"])))
    base = alt.Chart(points).encode(
        x=alt.X("bytes_per_step:Q", scale=alt.Scale(type="log"),
                title="bytes per step and rank (log scale)"),
        color=alt.Color("label:N", title="method"),
    )  # fmt: skip
    tooltip = ["label:N", "energy:N", "drawn:N", alt.Tooltip("y:Q", format=".4~g"),
               alt.Tooltip("interval:N", title="interval over seeds"), "per_seed:N"]  # fmt: skip
    y = alt.Y("y:Q", title=f"{LABELS['energy_to_target_j']} ({kinds})")
    reached = points[points["drawn"] == REACHED]
    layers = [
        base.transform_filter(alt.datum.drawn == REACHED)
        .mark_point(filled=True, size=80)
        .encode(y=y, shape=alt.Shape("drawn:N", title=None), tooltip=tooltip),
        base.transform_filter(alt.datum.drawn == MISSED)
        .mark_point(filled=False, size=120, strokeWidth=2)
        .encode(y=y, shape=alt.Shape("drawn:N", title=None), tooltip=tooltip),
    ]
    if len(reached):
        layers.append(
            base.transform_filter(alt.datum.drawn == REACHED)
            .mark_rule()
            .encode(y="low:Q", y2="high:Q")
        )
    return alt.layer(*layers).properties(height=360)


def comm_tab(db: Path) -> None:
    st.subheader("Communication-efficient data parallelism against DDP")
    st.caption(
        "Bytes per step and rank: a rank's collectives in the window ÷ its steps; step time: "
        "the window's seconds ÷ its steps; × DDP against DDP at the same rank count on the same "
        "link. Medians over the newest run's repeats. " + marking.ESTIMATE_NOTE
    )
    methods, targets = _methods(str(db)), _targets(str(db))
    if methods.empty and targets.empty:
        st.info(EMPTY)
        st.dataframe(pd.DataFrame(columns=list(COLUMNS)), hide_index=True,
                     placeholder=marking.MISSING)  # fmt: skip
        return
    if len(methods):
        st.dataframe(
            table(methods),
            hide_index=True,
            placeholder=marking.MISSING,
            key="comm_table",
            column_config={
                "step time (ms)": st.column_config.NumberColumn(format="%.4g"),
                "× DDP": st.column_config.NumberColumn(format="%.2f"),
                "waiting": st.column_config.NumberColumn(format="percent"),
            },
        )
    if len(targets):
        targets = with_bytes(targets, methods)
        st.markdown("**Energy and time to a target loss, over seeds**")
        st.markdown("\n".join(target_lines(targets)))
        st.caption(seeds_caption(targets["n_seeds"]))
        points = chart_points(targets)
        if len(points):
            st.markdown("**Bytes per step against energy to target**")
            st.altair_chart(bytes_energy_chart(points), width="stretch")
            st.caption(
                "Bytes as the comm-efficient workload measured them at the same rank count on "
                "the host's own transport; bars: the interval over seeds. Hollow: the median "
                "seed did not reach the target; drawn at the energy its budget spent."
            )
    said = [
        *(bytes_findings(methods) if len(methods) else []),
        *(speed_findings(methods) if len(methods) else []),
        *(target_findings(targets) if len(targets) else []),
    ]
    if said:
        st.markdown("**What the runs say**\n\n" + "\n".join(said))
