"""Altair charts of runs to a target loss (the Quality tab, and the Pareto view's to-target
axis), built from plain DataFrames (no Streamlit calls here).

As in every chart of the dashboard, shape (or colour, for bars) says where energy came from and
an estimate's axis says "≈ incl. estimates". Intervals are over seeds
(`greenbench.reporting.to_target`); an interval whose upper end is a seed that did not reach the
target is drawn up to the median and its tooltip says "not reached".
"""

from __future__ import annotations

import math

import altair as alt
import numpy as np
import pandas as pd

from greenbench.dashboard_app.charts import (
    DOMINATED,
    ON_FRONT,
    energy_shapes,
    step_interpolation,
)
from greenbench.reporting.to_target import LABELS, NOT_REACHED

ESTIMATE = "≈ estimate"
#: what a point trains per token: the whole model, or part of it
WHOLE, PARTIAL = "whole model", "partial model (skips stages)"
PARTIAL_COLOURS = alt.Scale(domain=[WHOLE, PARTIAL], range=["#1f77b4", "#2ca02c"])


def _title(label: str, kinds: pd.Series, energy: bool) -> str:
    return label + (" (≈ incl. estimates)" if energy and (kinds == ESTIMATE).any() else "")


def interval_ends(board: pd.DataFrame, figure: str) -> pd.DataFrame:
    """``board`` with ``low``/``high`` of ``figure`` drawable (an unreached end drawn at the
    median) and ``interval`` in words ("10–14", "10–not reached")."""
    low = pd.to_numeric(board[f"{figure}_low"], errors="coerce")
    high = pd.to_numeric(board[f"{figure}_high"], errors="coerce")
    median = pd.to_numeric(board[figure], errors="coerce")
    words = [
        "no interval (one seed)" if n < 2 else f"{lo:.4g}–" + (NOT_REACHED if math.isinf(hi)
                                                               else f"{hi:.4g}")
        for lo, hi, n in zip(low, high, board[f"{figure}_n"], strict=True)
    ]  # fmt: skip
    return board.assign(
        low=low, high=high.where(np.isfinite(high), median), value=median, interval=words
    )


def to_target_bars(board: pd.DataFrame, figure: str) -> alt.LayerChart:
    """One horizontal bar per configuration whose median seed reached the target: the median
    of ``figure`` over its seeds, with the interval over seeds as an error bar; coloured by the
    kind of energy figure (``energy_kind``)."""
    data = interval_ends(board, figure)
    data = data[np.isfinite(data["value"])]
    energy = figure.startswith("energy")
    y = alt.Y("config_name:N", title=None, sort=list(data["config_name"]),
              axis=alt.Axis(labelLimit=420))  # fmt: skip
    base = alt.Chart(data).encode(y=y)
    bars = base.mark_bar(opacity=0.8).encode(
        x=alt.X("value:Q", title=_title(LABELS[figure], data["energy_kind"], energy)),
        color=alt.Color("energy_kind:N", title="energy", legend=alt.Legend(orient="bottom")),
        tooltip=[
            "config_name:N", "energy:N", alt.Tooltip("value:Q", format=".4~g", title="median"),
            alt.Tooltip("interval:N", title="interval over seeds"), "n_seeds:Q", "n_reached:Q",
        ],
    )  # fmt: skip
    rules = base.mark_rule(color="black", strokeWidth=2).encode(x="low:Q", x2="high:Q")
    return alt.layer(bars, rules).properties(height=alt.Step(26))


def val_curve_chart(curves: pd.DataFrame, x: str, targets: pd.DataFrame) -> alt.LayerChart:
    """Validation loss against ``x`` (``joules`` or ``seconds`` of training), one line per
    seed and repeat coloured by configuration, and each configuration's target as a
    horizontal rule of its colour (``targets``: ``config_name``, ``target_loss``)."""
    data = curves.dropna(subset=[x, "val_loss"]).assign(
        line=curves["run_id"].astype(str) + "/" + curves["repeat"].astype(str)
    )
    title = {"joules": "training energy (J)", "seconds": "training time (s)"}[x]
    if x == "joules":
        title = _title(title, data["energy_kind"], True)
    color = alt.Color("config_name:N", title="configuration", legend=alt.Legend(labelLimit=420))
    lines = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=20))
        .encode(
            x=alt.X(f"{x}:Q", title=title),
            y=alt.Y("val_loss:Q", title="validation loss (nats/token)",
                    scale=alt.Scale(zero=False)),
            color=color,
            detail="line:N",
            order="step:Q",
            tooltip=["config_name:N", "seed:N", "repeat:Q", "step:Q", "tokens:Q",
                     alt.Tooltip(f"{x}:Q", format=".4~g"),
                     alt.Tooltip("val_loss:Q", format=".4f"), "energy:N"],
        )
    )  # fmt: skip
    rules = (
        alt.Chart(targets)
        .mark_rule(strokeDash=[6, 4])
        .encode(y="target_loss:Q", color=color,
                tooltip=["config_name:N", alt.Tooltip("target_loss:Q", format=".4f")])
    )  # fmt: skip
    return alt.layer(lines, rules).properties(height=360)


def target_pareto_chart(points: pd.DataFrame, y: str) -> alt.LayerChart:
    """Time against energy (``y``) to the target, medians over seeds: the points (shape: kind
    of energy; a partial-model run ranked like any other), their front per ``front_group``
    as a step line, and each point's interval over seeds on both axes."""
    x = "seconds_to_target"
    kinds = points["energy_kind"]
    data = interval_ends(interval_ends(points, x).rename(
        columns={"low": "x_low", "high": "x_high", "interval": "x_interval"}), y)  # fmt: skip
    enc_x = alt.X(f"{x}:Q", title=f"{LABELS[x]} — lower is better", scale=alt.Scale(zero=False))
    enc_y = alt.Y(
        f"{y}:Q", title=f"{_title(LABELS[y], kinds, True)} — lower is better",
        scale=alt.Scale(zero=False),
    )  # fmt: skip
    scatter = (
        alt.Chart(data)
        .mark_point(filled=True, stroke="black")
        .encode(
            x=enc_x,
            y=enc_y,
            shape=alt.Shape("energy_kind:N", title="energy", scale=energy_shapes(kinds)),
            color=alt.Color("partial:N", title="model per token", scale=PARTIAL_COLOURS),
            size=alt.condition("datum.on_front", alt.value(ON_FRONT["size"]),
                               alt.value(DOMINATED["size"])),
            opacity=alt.condition("datum.on_front", alt.value(ON_FRONT["opacity"]),
                                  alt.value(DOMINATED["opacity"])),
            tooltip=["config_name:N", "workload:N", "energy:N",
                     alt.Tooltip(f"{x}:Q", format=".4~g"), "x_interval:N",
                     alt.Tooltip(f"{y}:Q", format=".4~g"), "interval:N", "n_seeds:Q",
                     "n_reached:Q", "on_front:N"],
        )
    )  # fmt: skip
    x_bars = alt.Chart(data).mark_rule(color="gray").encode(x="x_low:Q", x2="x_high:Q", y=f"{y}:Q")
    y_bars = alt.Chart(data).mark_rule(color="gray").encode(x=f"{x}:Q", y="low:Q", y2="high:Q")
    front = (
        alt.Chart(data[data["on_front"]].sort_values([x, y]))
        .mark_line(interpolate=step_interpolation("min"), color="black", strokeWidth=1.5)
        .encode(x=f"{x}:Q", y=f"{y}:Q", detail="front_group:N",
                strokeDash=alt.StrokeDash("front_group:N", title="Pareto front"), order=f"{x}:Q")
    )  # fmt: skip
    return alt.layer(x_bars, y_bars, front, scatter).properties(height=460)
