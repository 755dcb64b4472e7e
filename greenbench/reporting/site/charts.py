"""The site's interactive charts (Altair, Vega-Lite), drawn from the same rows as the report's
PNGs and labelled as they are.

Each chart says where its energy came from: the axis and title name the energy label
("measured (rapl)", "estimate", "simulated (model)"), an estimate's title says it is time ×
modelled power, and a chart never pools two kinds of energy on one front or line. Error bars are
the rows' intervals (a 95 % CI of the median from 6 repeats, else the min–max range of the
repeats, said in the caption and each tooltip). A configuration measured on a shared machine is
ringed in red and named in its tooltip's trust; a partial-model run is a grey square, on no
front. Every tooltip carries the row's trust markers.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from greenbench.reporting import figures
from greenbench.reporting.cells import ESTIMATE_FOLLOWS_TIME, PARTIAL
from greenbench.vocabulary.trust import CONTENDED, flagged

#: the mark of each kind of point on a Pareto chart
POINTS = {"configuration": "circle", "front": "diamond", f"{PARTIAL} (off the front)": "square"}
WIDTH = 460


def tooltips(*, repeats: bool) -> list[alt.Tooltip]:
    """What hovering a configuration's mark says: its name, energy label, medians, interval,
    (repeats) and trust."""
    shown = [
        alt.Tooltip("config_name:N", title="configuration"),
        alt.Tooltip("energy:N", title="energy"),
        alt.Tooltip("jpt:Q", title="J/token (median)", format=".4~g"),
        alt.Tooltip("tokens_per_s:Q", title="tokens/s (median)", format=".4~g"),
        alt.Tooltip("interval:N", title="interval"),
    ]
    if repeats:
        shown.append(alt.Tooltip("n_repeats:Q", title="repeats"))
    return [*shown, alt.Tooltip("trust:N", title="trust")]


def _scale(values: pd.Series) -> alt.Scale:
    """Log where the positive values span more than a factor of 20 (as the report's PNGs)."""
    v = pd.to_numeric(values, errors="coerce")
    v = v[v > 0]
    if len(v) and v.max() / v.min() > 20:
        return alt.Scale(type="log")
    return alt.Scale(zero=False)


def _title(text: str, energy: str) -> alt.TitleParams:
    """A chart's title, and under it what an estimate is where the energy is one."""
    subtitle = [f"energy: {energy}"]
    if energy == "estimate":
        subtitle.append(f"J/token is an {ESTIMATE_FOLLOWS_TIME}")
    return alt.TitleParams(text, subtitle=subtitle, anchor="start")


def _trust_columns(rows: pd.DataFrame) -> pd.DataFrame:
    """``contended`` as a boolean Vega can test (unknown: not contended) and ``trust`` as text."""
    return rows.assign(
        contended=rows["contended"].map(flagged).astype(bool),
        trust=rows["trust"].fillna("").astype(str),
        interval=rows["interval"].fillna("").astype(str),
    )


def pareto_chart(rows: pd.DataFrame, front: pd.Series, workload: str, energy: str) -> alt.Chart:
    """Tokens/s against J/token for one workload and energy label (leaderboard ``rows``, the
    report's short columns), ``front`` marking the rows on its Pareto front, drawn as a step
    line; each point's intervals on both axes."""
    partial = rows["partial_model"].astype(bool)
    shorts = figures.short_labels(list(rows["config_name"]))[0]
    data = _trust_columns(rows).assign(
        short=shorts,
        on_front=front.astype(bool).to_numpy(),
        point=np.where(
            partial, f"{PARTIAL} (off the front)", np.where(front, "front", "configuration")
        ),
    )[
        ["config_name", "short", "tokens_per_s", "tokens_per_s_ci_low", "tokens_per_s_ci_high",
         "jpt", "jpt_lo", "jpt_hi", "n_repeats", "interval", "trust", "contended", "on_front",
         "point", "energy"]
    ]  # fmt: skip
    x = alt.X(
        "tokens_per_s:Q", title="tokens/s (higher is better)", scale=_scale(data["tokens_per_s"])
    )
    y = alt.Y("jpt:Q", title=f"J/token, {energy} (lower is better)", scale=_scale(data["jpt"]))
    base = alt.Chart(data)
    present = [k for k in POINTS if k in set(data["point"])]
    points = base.mark_point(filled=True, size=110, stroke="black").encode(
        x=x,
        y=y,
        shape=alt.Shape("point:N", title="point",
                        scale=alt.Scale(domain=present, range=[POINTS[k] for k in present])),
        color=alt.Color("point:N", legend=None, scale=alt.Scale(
            domain=present, range=[{"front": "#222", "configuration": "#4c78a8"}.get(k, "#999")
                                   for k in present])),
        strokeWidth=alt.condition("datum.contended", alt.value(3), alt.value(0.8)),
        tooltip=[*tooltips(repeats=True), alt.Tooltip("on_front:N", title="on the front")],
    )  # fmt: skip
    ring = (
        base.transform_filter("datum.contended")
        .mark_point(size=420, color="red", strokeWidth=2)
        .encode(x=x, y=y)
    )
    y_bars = base.mark_rule(color="#888").encode(x=x, y="jpt_lo:Q", y2="jpt_hi:Q")
    x_bars = base.mark_rule(color="#888").encode(
        y=y, x="tokens_per_s_ci_low:Q", x2="tokens_per_s_ci_high:Q"
    )
    line = (
        base.transform_filter("datum.on_front")
        .mark_line(interpolate="step-before", color="black", strokeDash=[5, 3], strokeWidth=1)
        .encode(x=x, y=y, order="tokens_per_s:Q")
    )
    labels = (
        base.transform_filter("datum.on_front")
        .mark_text(align="left", dx=8, dy=-8, fontSize=10)
        .encode(x=x, y=y, text="short:N")
    )
    title = _title(f"{workload}: speed against energy", energy)
    layers = [y_bars, x_bars, line, points, labels]
    if data["contended"].any():
        layers.insert(3, ring)
    return alt.layer(*layers).properties(width=WIDTH, height=340, title=title)


def workload_chart(rows: pd.DataFrame, workload: str) -> alt.HConcatChart:
    """One workload's configurations: J/token and tokens/s (medians with interval bars), each
    row labelled with its energy, partial model and contention as the report's bars are."""
    order = ["energy", "model_family", "strategy", "seq_len", "config_name"]
    rows = rows.sort_values(order).reset_index(drop=True)
    shorts, common = figures.short_labels(list(rows["config_name"]))
    partial = rows["partial_model"].astype(bool)
    labels = [
        f"{n} [{e}]" + (" [partial]" if p else "") + (f" {CONTENDED}" if flagged(c) else "")
        for n, e, p, c in zip(shorts, rows["energy"], partial, rows["contended"], strict=True)
    ]
    data = _trust_columns(rows).assign(label=labels)[
        ["label", "config_name", "energy", "jpt", "jpt_lo", "jpt_hi", "tokens_per_s",
         "tokens_per_s_ci_low", "tokens_per_s_ci_high", "n_repeats", "interval", "trust"]
    ]  # fmt: skip
    y = alt.Y("label:N", sort=list(data["label"]), title=None)
    tooltip = tooltips(repeats=True)
    color = alt.Color("energy:N", title="energy")
    base = alt.Chart(data).properties(width=300)
    energy = base.mark_bar().encode(
        x=alt.X("jpt:Q", title=f"J/token (median, bars {figures.bars(rows)})"),
        y=y, color=color, tooltip=tooltip,
    ) + base.mark_rule(color="black").encode(x="jpt_lo:Q", x2="jpt_hi:Q", y=y)  # fmt: skip
    speed = base.mark_bar().encode(
        x=alt.X("tokens_per_s:Q", title="tokens/s (median)"),
        y=alt.Y("label:N", sort=list(data["label"]), axis=None),
        color=color, tooltip=tooltip,
    ) + base.mark_rule(color="black").encode(
        x="tokens_per_s_ci_low:Q", x2="tokens_per_s_ci_high:Q",
        y=alt.Y("label:N", sort=list(data["label"]), axis=None),
    )  # fmt: skip
    title = f"{workload}: {common}" if common else workload
    return alt.hconcat(energy, speed).properties(
        title=alt.TitleParams(title, subtitle=["J/token per energy label (in brackets)"],
                              anchor="start")
    )  # fmt: skip


def seq_len_chart(rows: pd.DataFrame) -> alt.HConcatChart:
    """J/token and tokens/s against sequence length, one line per model and energy label (a
    line never joins two kinds of energy figure or two devices)."""
    data = _trust_columns(rows).assign(
        series=[
            f"{f}/{s} ({e})"
            for f, s, e in zip(rows["model_family"], rows["model_size"], rows["energy"],
                               strict=True)
        ],
        hardware=rows["device_type"].astype(str) + " ×" + rows["devices"].astype(str),
    )[
        ["series", "hardware", "config_name", "energy", "seq_len", "jpt", "jpt_lo", "jpt_hi",
         "tokens_per_s", "tokens_per_s_ci_low", "tokens_per_s_ci_high", "n_repeats", "interval",
         "trust"]
    ]  # fmt: skip
    lengths = sorted({int(v) for v in pd.to_numeric(data["seq_len"], errors="coerce").dropna()})
    x = alt.X("seq_len:Q", title="sequence length (tokens)",
              scale=alt.Scale(type="log", base=2), axis=alt.Axis(values=lengths))  # fmt: skip
    color = alt.Color("series:N", title="model (energy)")
    tooltip = tooltips(repeats=False)
    base = alt.Chart(data).properties(width=400, height=280)
    energies = " / ".join(sorted(set(rows["energy"])))

    def panel(metric: str, low: str, high: str, title: str) -> alt.LayerChart:
        line = base.mark_line(point=alt.OverlayMarkDef(filled=True, size=60)).encode(
            x=x, y=alt.Y(f"{metric}:Q", title=title, scale=alt.Scale(zero=False)),
            color=color, detail="hardware:N", tooltip=tooltip,
        )  # fmt: skip
        bars = base.mark_rule().encode(x=x, y=f"{low}:Q", y2=f"{high}:Q", color=color)
        return bars + line

    return alt.hconcat(
        panel("jpt", "jpt_lo", "jpt_hi", f"J/token, {energies}"),
        panel("tokens_per_s", "tokens_per_s_ci_low", "tokens_per_s_ci_high", "tokens/s"),
    ).properties(
        title=alt.TitleParams(
            "J/token and tokens/s against sequence length",
            subtitle=[f"medians, bars {figures.bars(rows)}; energy: {energies}"],
            anchor="start",
        )
    )


def history_chart(hist: pd.DataFrame, metric: str, title: str) -> alt.LayerChart:
    """One configuration's ``metric`` per commit (or day), in the order of each one's first
    run, with its interval bars; one line per energy label and run label (`history_frame`'s
    rows: ``line``)."""
    order = list(dict.fromkeys(hist["commit"]))
    lines = "line" if "line" in hist else "energy"
    base = alt.Chart(hist).encode(
        x=alt.X("commit:N", sort=order, title="commit · its first run (oldest first)",
                axis=alt.Axis(labelAngle=-30)),
        color=alt.Color(f"{lines}:N", title="energy" if lines == "energy" else "energy · label"),
    )  # fmt: skip
    line = base.mark_line(point=alt.OverlayMarkDef(filled=True, size=70)).encode(
        y=alt.Y(f"{metric}:Q", title=title, scale=alt.Scale(zero=False)),
        tooltip=[
            alt.Tooltip("git_sha:N", title="git sha"),
            alt.Tooltip("first_run:N", title="first run"),
            alt.Tooltip("last_run:N", title="last run"),
            alt.Tooltip("energy:N", title="energy"),
            alt.Tooltip(f"{metric}:Q", title=f"{title} (median)", format=".4~g"),
            alt.Tooltip("n_repeats:Q", title="repeats"),
            alt.Tooltip("n_runs:Q", title="runs"),
            alt.Tooltip("interval:N", title="interval"),
            alt.Tooltip("trust:N", title="trust"),
        ],
    )
    bars = base.mark_rule().encode(y=f"{metric}_ci_low:Q", y2=f"{metric}_ci_high:Q")
    return alt.layer(bars, line).properties(width=WIDTH, height=280)
