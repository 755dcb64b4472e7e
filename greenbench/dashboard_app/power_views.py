"""The dashboard's power-limit view: each stored sweep (one configuration over its GPU power
limits, `greenbench.reporting.limit_sweep`) as time against J/token coloured by limit, with the
Pareto front and the knee, the table the report shows, and Zeus's choice beside the knee.
Sweeps of emulated GPUs are shown as the model they are, never as measurements. A sweep whose
time falls with the limit beyond its noise is shown as inconsistent, naming the limits that
disagree, with no front, knee or choice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from greenbench.dashboard_app import charts, data, marking
from greenbench.reporting.limit_sweep import (
    COLUMNS,
    INCONSISTENT,
    MAX_SLOWDOWN,
    ZEUS_ETA,
    Sweep,
    sweeps,
)
from greenbench.reporting.repeats import read_repeats

#: the table's columns: (per-limit column, heading). Relative figures are percentages against
#: the highest limit (time +2.0 %: 2 % slower; J/token saved 12.0 %), never ratios
TABLE = (
    ("limit_w", "limit (W)"),
    ("tokens_per_s", "tokens/s"),
    ("joules_per_token", "J/token"),
    ("slowdown", "time vs highest %"),
    ("saving", "J/token saved vs highest %"),
    ("gpu_power_avg_w", "GPU power mean (W)"),
    ("gpu_power_peak_w", "GPU power peak (W)"),
    ("on_front", "on front"),
    ("repeats", "repeats"),
)
#: how each heading's numbers are written (st.column_config's printf formats)
FORMATS = {
    "limit (W)": "%.0f",
    "tokens/s": "%.1f",
    "J/token": "%.4g",
    "time vs highest %": "%+.1f %%",
    "J/token saved vs highest %": "%+.1f %%",
    "GPU power mean (W)": "%.1f",
    "GPU power peak (W)": "%.1f",
}
HOW_TO = (
    "No power-limit sweep is stored yet. `greenbench run --workload power-limit` sweeps the "
    "limit on a GPU (root or zeusd); without one, `--set emulate.gpu=h100 --set model.size=tiny` "
    "runs it on an emulated GPU (a model, labelled so)."
)


@st.cache_data(ttl=data.CACHE_TTL_S, show_spinner=False)
def _rows(db_path: str) -> pd.DataFrame:
    return read_repeats(db_path, COLUMNS)


def table(sweep: Sweep) -> pd.DataFrame:
    """A sweep's per-limit table with the view's headings, rounded as shown: time and J/token
    against the highest limit in percent (``slowdown`` 1.02 → +2.0, ``saving`` 0.12 → 12.0)."""
    out = sweep.table[[c for c, _ in TABLE]].copy()
    out["slowdown"] = ((out["slowdown"] - 1.0) * 100.0).round(1)
    out["saving"] = (out["saving"] * 100.0).round(1)
    for column in ("tokens_per_s", "gpu_power_avg_w", "gpu_power_peak_w"):
        out[column] = out[column].round(1)
    out["joules_per_token"] = out["joules_per_token"].map(lambda v: float(f"{v:.4g}"))
    return out.rename(columns=dict(TABLE))


def formats() -> dict[str, Any]:
    """The table's column formats (`FORMATS`)."""
    return {h: st.column_config.NumberColumn(format=f) for h, f in FORMATS.items()}


def power_limits_tab(db: Path) -> None:
    st.subheader("GPU power limits: time against energy")
    found = sweeps(_rows(str(db)))
    if not found:
        st.info(HOW_TO)
        st.dataframe(
            pd.DataFrame(columns=[h for _, h in TABLE]),
            hide_index=True,
            placeholder=marking.MISSING,
        )
        return
    names = [f"{s.name} · {s.device_type} ×{s.devices} · {s.energy}" for s in found]
    sweep = found[names.index(st.selectbox("sweep", names, key="power_sweep"))]
    if not sweep.measured:
        st.warning(
            "These figures come from a model, not a measurement: an emulated GPU's power model "
            "answering NVML on CPU ranks. They show the workload's path and shape, never a result."
        )
    if not sweep.consistent:
        st.error(
            "\n".join([f"**{INCONSISTENT}.**", *(f"- {why}" for why in sweep.inconsistencies)])
        )
    st.altair_chart(
        charts.power_limit_chart(sweep.table, sweep.knee_w, sweep.energy), width="stretch"
    )
    st.dataframe(
        table(sweep), hide_index=True, placeholder=marking.MISSING, column_config=formats()
    )
    if sweep.knee_w is not None:
        knee = sweep.table[sweep.table["limit_w"] == sweep.knee_w].iloc[0]
        st.markdown(
            f"**Knee: {sweep.knee_w:g} W**, the lowest J/token within {MAX_SLOWDOWN - 1:.0%} of "
            f"the highest limit's time: {-knee['saving']:+.1%} J/token for "
            f"{knee['slowdown'] - 1:+.1%} time."
        )
    for note in sweep.notes:
        st.caption(note)
    if sweep.zeus_cost_w is not None:
        st.caption(
            f"Zeus's GlobalPowerLimitOptimizer would choose {sweep.zeus_cost_w:g} W with its "
            f"default ZeusCost(η = {ZEUS_ETA:g}), {sweep.zeus_slowdown_w:g} W with "
            f"MaxSlowdownConstraint({MAX_SLOWDOWN:g}): computed with Zeus's published selectors "
            "from this sweep, not by running its callbacks."
        )
