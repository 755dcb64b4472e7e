"""The leaderboard table and the Pareto view (both over the aggregated, filtered board)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from greenbench.dashboard_app import charts, detail_views, marking
from greenbench.reporting.leaderboard import METRICS, comparable_front

CATEGORIES = ("workload", "model_family", "strategy", "device_type", "precision", "energy")


#: widths of the leaderboard's columns (px): with the row-selection column they take about
#: 922 px, which fits the 938 px the table gets in a 1400 px window beside the sidebar; a longer
#: cell is cut with an ellipsis and shown whole on hover
WIDTHS = {"configuration": 165, "energy": 95, "J/token": 85, "J/token interval": 90,
          "J/token net": 85, "tokens/s": 58, marking.MFU_SHOWN: 60, "mem MiB": 52,
          "CO2 g/M tok": 70, "repeats": 36, "trust": 95}  # fmt: skip


def leaderboard_columns() -> dict[str, Any]:
    """The shown leaderboard columns' widths and help texts (`marking.LEADERBOARD_HELP`)."""
    return {
        name: st.column_config.Column(width=WIDTHS[name], help=marking.LEADERBOARD_HELP[name])
        for name in marking.LEADERBOARD_SHOWN
    }


def leaderboard_view(db: Path, board: pd.DataFrame) -> None:
    st.subheader("Leaderboard")
    st.caption(
        "One row per configuration and energy source; medians over its repeats. "
        "Click a column header to sort, a row to open the configuration."
    )
    if board.empty:
        st.info("No configuration matches the filters.")
        return
    table = marking.leaderboard_table(board)
    styled = marking.style_marked(
        table, board["energy_measured"], (*marking.ENERGY_DISPLAY, "energy")
    )
    event = st.dataframe(
        styled,
        hide_index=True,
        placeholder=marking.MISSING,
        key="leaderboard_table",
        on_select="rerun",
        selection_mode="single-row",
        column_order=marking.LEADERBOARD_SHOWN,
        column_config=leaderboard_columns(),
    )
    st.caption(marking.ESTIMATE_NOTE)
    st.caption(marking.interval_note(board["n_repeats"]) + " " + marking.TRUST_NOTE)
    selected = event.selection.rows if event is not None else []
    if selected and selected[0] < len(board):  # a stale selection after filtering is ignored
        detail_views.config_detail(
            db, marking.with_labels(board).iloc[selected[0]], key="board_open"
        )


def _picked(event: object) -> str | None:
    """The row id of the point clicked in the chart, if any."""
    try:
        picks = event.selection[charts.SELECTION]  # type: ignore[attr-defined]
    except (AttributeError, KeyError, TypeError):
        return None
    for pick in picks or []:
        if isinstance(pick, dict) and pick.get("row_id"):
            return str(pick["row_id"])
    return None


#: the Pareto view's energy axes: per token (the leaderboard's), or to a target loss
ENERGY_AXES = ("J/token", "energy to target")


def pareto_view(db: Path, board: pd.DataFrame, to_target: Callable[[], None] | None = None) -> None:
    """Any two leaderboard metrics against each other with their fronts; with ``to_target``
    (the view of runs to a target loss), an "energy to target" axis beside J/token that
    shows it instead."""
    st.subheader("Pareto front")
    if to_target is not None:
        axis = st.radio("energy axis", ENERGY_AXES, horizontal=True, key="p_axis")
        if axis == ENERGY_AXES[1]:
            to_target()
            return
    metrics = list(METRICS)
    label = {m: METRICS[m].label for m in metrics}.get
    c1, c2, c3, c4 = st.columns(4)
    x = c1.selectbox(
        "x axis", metrics, index=metrics.index("tokens_per_s"), format_func=label, key="p_x"
    )
    y = c2.selectbox(
        "y axis", metrics, index=metrics.index("joules_per_token"), format_func=label, key="p_y"
    )
    color = c3.selectbox(
        "colour by",
        [None, *CATEGORIES, *metrics],
        key="p_color",
        format_func=lambda m: (
            "–" if m is None else METRICS[m].label if m in METRICS else marking.heading(m)
        ),
    )
    size = c4.selectbox(
        "size by",
        [None, *metrics],
        key="p_size",
        format_func=lambda m: "–" if m is None else METRICS[m].label,
    )
    if x == y:
        st.info("Choose two different metrics.")
        return
    points = marking.with_labels(board).dropna(subset=[x, y])
    if size:
        points = points.dropna(subset=[size])
    if points.empty:
        st.info("No configuration has both metrics; change the axes or the filters.")
        return
    split = METRICS[x].energy or METRICS[y].energy
    # one front per workload (a workload's tokens are not another's) and, on an energy axis,
    # per kind of energy figure; a partial-model run is on none (`comparable_front`)
    points["front_group"] = points["workload"].astype(str) + (
        " · " + points["energy_kind"] if split else ""
    )
    points["on_front"] = comparable_front(
        points, x, y, METRICS[x].better, METRICS[y].better, by=("front_group",)
    )
    if points["front_group"].nunique() > 1:
        st.info(
            "Workloads, and measured and estimated energy, are not comparable: each has its own "
            "front (line style), and triangles mark estimates."
            if split
            else "Workloads are not comparable (a workload's tokens are not another's): each has "
            "its own front (line style)."
        )
    chart = charts.pareto_chart(points, x, y, METRICS[x].better, color=color, size=size)
    event = st.altair_chart(
        chart,
        on_select="rerun",
        selection_mode=charts.SELECTION,
        key="pareto_chart",
        width="stretch",
    )
    busy = int(points["contended"].map(marking.trust.flagged).sum())
    st.caption(
        "Larger, outlined points are non-dominated: no other configuration is at least "
        "as good on both axes and better on one. "
        + (
            f"{busy} {marking.trust.CONTENDED} point(s), measured while the machine was shared, "
            "are ringed in red (the sidebar hides them). "
            if busy
            else ""
        )
        + (
            f"{partial} partial-model point(s) (SkipPipe skipping stages: part of the model per "
            "token) are drawn but on no front. "
            if (partial := int(points["partial_model"].map(marking.trust.flagged).sum()))
            else ""
        )
        + marking.ESTIMATE_NOTE
    )
    front = points[points["on_front"]].sort_values(x, ascending=METRICS[x].better == "min")
    table = pd.DataFrame(
        {
            "configuration": front["config_name"],
            "workload": front["workload"],
            METRICS[x].label: front[x],
            METRICS[y].label: front[y],
            "energy": front["energy"],
            "trust": front["trust"],
        }
    ).reset_index(drop=True)
    energy_cols = tuple(METRICS[m].label for m in (x, y) if METRICS[m].energy)
    st.markdown(f"**Non-dominated configurations** ({len(front)} of {len(points)})")
    st.dataframe(
        marking.style_marked(table, front["energy_measured"], (*energy_cols, "energy")),
        hide_index=True,
        placeholder=marking.MISSING,
    )
    ordered = pd.concat([front, points[~points["on_front"]]])
    names = dict(
        zip(ordered["row_id"], ordered["config_name"] + " · " + ordered["energy"], strict=True)
    )
    chosen = st.selectbox(
        "Open configuration (or click a point)",
        [None, *names],
        format_func=lambda r: "–" if r is None else names[r],
        key="p_open",
    )
    target = _picked(event) or chosen
    if target in names:
        row = ordered[ordered["row_id"] == target].iloc[0]
        detail_views.config_detail(db, row, key="pareto_open")
