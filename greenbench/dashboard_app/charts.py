"""Altair charts of the dashboard, built from plain DataFrames (no Streamlit calls here).

Shape encodes where energy came from (filled circle: measured; triangle: estimate) in every
chart that shows an energy figure, and the legend names it. A point measured while the machine
was shared (``contended``, the trust model's ``⚠ contended``) is ringed in red and its tooltip
carries the trust markers. Error bars are the rows' ``_ci_low``/``_ci_high``: a 95 % CI of the
median from 6 repeats, else the min–max range (the ``interval`` in the tooltip says which).
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from greenbench.dashboard_app.marking import heading
from greenbench.reporting.leaderboard import METRICS, Better
from greenbench.vocabulary.trust import flagged

#: the shape of each kind of energy figure (`marking.KIND_NAMES`)
SHAPES = {"measured": "circle", "≈ estimate": "triangle-up", "emulated": "diamond",
          "simulated": "square"}  # fmt: skip
#: how a dominated point is drawn (legible: a full-size mark, slightly lighter, thin outline)
#: against a point on the front
DOMINATED = {"opacity": 0.75, "size": 110, "stroke": 0.8}
ON_FRONT = {"opacity": 1.0, "size": 160, "stroke": 2.0}


def energy_shapes(kinds: pd.Series) -> alt.Scale:
    """The shape scale of the kinds of energy present in ``kinds`` only: a legend never lists
    a kind no point has."""
    present = [k for k in SHAPES if k in set(kinds)]
    return alt.Scale(domain=present, range=[SHAPES[k] for k in present])


SELECTION = "pick"  # name of the point-selection parameter of the Pareto chart


def axis_title(metric: str, has_estimates: bool, short: bool = False) -> str:
    """Metric label, "≈ incl. estimates" when estimated energy is plotted, and which way is
    better (left out when ``short``, for narrow charts)."""
    m = METRICS[metric]
    mark = " (≈ incl. estimates)" if m.energy and has_estimates else ""
    if short:
        return f"{m.label}{mark}"
    return f"{m.label}{mark} — {'higher' if m.better == 'max' else 'lower'} is better"


def step_interpolation(x_better: Better) -> str:
    """Step shape of the front line: it must run through the corners the front dominates.

    Between neighbours a (smaller x) and b, the corner (b.x, a.y) is dominated by a when
    smaller x is better ("step-after"); when larger x is better it is (a.x, b.y) ("step-before").
    """
    return "step-after" if x_better == "min" else "step-before"


def pareto_chart(
    points: pd.DataFrame,
    x: str,
    y: str,
    x_better: Better,
    color: str | None = None,
    size: str | None = None,
) -> alt.LayerChart:
    """Scatter of ``points`` (columns x, y, ``on_front``, ``energy_kind``, ``front_group``,
    ``row_id``, ``config_name``) with the front drawn as a step line per ``front_group``."""
    has_est = bool((points["energy_kind"] == "≈ estimate").any())
    selection = alt.selection_point(name=SELECTION, fields=["row_id"], on="click")
    tooltip = [
        "config_name:N",
        "workload:N",
        "energy:N",
        "device_type:N",
        alt.Tooltip(f"{x}:Q", format=".4~g"),
        alt.Tooltip(f"{y}:Q", format=".4~g"),
        "n_repeats:Q",
        "on_front:N",
        *(["trust:N"] if "trust" in points else []),
    ]
    contended = "contended" in points and bool(points["contended"].map(flagged).any())
    if contended:  # a boolean field Vega can test: NULL (unknown) reads as not contended
        points = points.assign(contended=points["contended"].map(flagged))
    enc: dict[str, object] = {
        "x": alt.X(f"{x}:Q", title=axis_title(x, has_est), scale=alt.Scale(zero=False)),
        "y": alt.Y(f"{y}:Q", title=axis_title(y, has_est), scale=alt.Scale(zero=False)),
        "shape": alt.Shape(
            "energy_kind:N", title="energy", scale=energy_shapes(points["energy_kind"])
        ),
        "opacity": alt.condition(
            "datum.on_front", alt.value(ON_FRONT["opacity"]), alt.value(DOMINATED["opacity"])
        ),
        "strokeWidth": alt.condition(
            "datum.on_front", alt.value(ON_FRONT["stroke"]), alt.value(DOMINATED["stroke"])
        ),
        "tooltip": tooltip,
    }
    if contended:  # ringed in red, whether on the front or not
        enc["stroke"] = alt.condition("datum.contended", alt.value("red"), alt.value("black"))
        points = points.assign(ring=[3.0 if c else ON_FRONT["stroke"] if f
                                     else DOMINATED["stroke"]
                                     for c, f in zip(points["contended"], points["on_front"],
                                                     strict=True)])  # fmt: skip
        enc["strokeWidth"] = alt.StrokeWidth("ring:Q", scale=None, legend=None)
    if color:
        kind = "Q" if color in METRICS else "N"
        title = METRICS[color].label if color in METRICS else heading(color)
        enc["color"] = alt.Color(f"{color}:{kind}", title=title)
    if size:
        enc["size"] = alt.Size(f"{size}:Q", title=METRICS[size].label)
    else:
        enc["size"] = alt.condition(
            "datum.on_front", alt.value(ON_FRONT["size"]), alt.value(DOMINATED["size"])
        )
    scatter = (
        alt.Chart(points)
        .mark_point(filled=True, stroke="black")
        .encode(**enc)
        .add_params(selection)
    )
    front = points[points["on_front"]].sort_values([x, y])
    line = (
        alt.Chart(front)
        .mark_line(interpolate=step_interpolation(x_better), color="black", strokeWidth=1.5)
        .encode(
            x=f"{x}:Q",
            y=f"{y}:Q",
            detail="front_group:N",
            strokeDash=alt.StrokeDash("front_group:N", title="Pareto front"),
            order=f"{x}:Q",
        )
    )
    return alt.layer(line, scatter).properties(height=460)


def comparison_chart(rows: pd.DataFrame, x: str, metric: str, color: str) -> alt.LayerChart:
    """Median of ``metric`` against ``x`` per ``color`` with interval error bars (a board
    subset; the tooltip names the interval)."""
    x_kind = "Q" if pd.api.types.is_numeric_dtype(rows[x]) else "O"
    has_est = bool((rows["energy_kind"] == "≈ estimate").any())
    base = alt.Chart(rows).encode(
        x=alt.X(f"{x}:{x_kind}", title=heading(x)),
        color=alt.Color(f"{color}:N", title=heading(color)),
    )
    points = base.mark_point(filled=True, size=80).encode(
        y=alt.Y(
            f"{metric}:Q",
            title=axis_title(metric, has_est, short=True),
            scale=alt.Scale(zero=False),
        ),
        shape=alt.Shape("energy_kind:N", title="energy", scale=energy_shapes(rows["energy_kind"])),
        tooltip=[
            "config_name:N",
            "energy:N",
            alt.Tooltip(f"{metric}:Q", format=".4~g"),
            "n_repeats:Q",
            *(["interval:N", "trust:N"] if "trust" in rows else []),
        ],
    )
    bars = base.mark_rule().encode(y=f"{metric}_ci_low:Q", y2=f"{metric}_ci_high:Q")
    layers = [bars, points]
    if x_kind == "Q":
        # one line per series, device type and energy kind: never join a CPU estimate to a
        # GPU measurement
        layers.insert(
            0, base.mark_line().encode(y=f"{metric}:Q", detail=["energy_kind:N", "device_type:N"])
        )
    return alt.layer(*layers).properties(height=300)


def rank_split_chart(ranks: pd.DataFrame) -> alt.Chart:
    """Stacked compute / communication / waiting seconds per rank."""
    long = ranks[["rank", "compute_s", "comm_s", "wait_s"]].melt(
        id_vars=["rank"],
        value_vars=["compute_s", "comm_s", "wait_s"],
        var_name="phase",
        value_name="seconds",
    )
    long["phase"] = long["phase"].map(
        {"compute_s": "compute", "comm_s": "communication", "wait_s": "waiting"}
    )
    return (
        alt.Chart(long)
        .mark_bar()
        .encode(
            x=alt.X("rank:O", title="rank"),
            y=alt.Y("seconds:Q", title="seconds in the measured window", stack="zero"),
            color=alt.Color("phase:N", sort=["compute", "communication", "waiting"]),
            tooltip=["rank:O", "phase:N", alt.Tooltip("seconds:Q", format=".3f")],
        )
        .properties(height=260)
    )


def power_chart(samples: pd.DataFrame, measured: bool) -> alt.Chart:
    """Power over time, one line per (rank, component)."""
    title = "power (W)" if measured else "power (W, ≈ estimate)"
    data = samples.assign(series=samples["component"] + " rank " + samples["rank"].astype(str))
    return (
        alt.Chart(data)
        .mark_line()
        .encode(
            x=alt.X("t_s:Q", title="time in window (s)"),
            y=alt.Y("power_w:Q", title=title, scale=alt.Scale(zero=False)),
            color=alt.Color("series:N", title="meter"),
            tooltip=["series:N", "t_s:Q", "power_w:Q"],
        )
        .properties(height=260)
    )


def history_chart(
    hist: pd.DataFrame, metric: str, title: str = "git sha (order of first run)"
) -> alt.LayerChart:
    """One metric per history point (``shown``, else ``git_sha``; in first-run order), one line
    per series (the label, with its energy where a history holds several), with interval error
    bars (`greenbench.reporting.leaderboard.history`'s rows)."""
    has_est = bool((hist["energy_kind"] == "≈ estimate").any())
    data = hist.assign(shown=hist["shown"] if "shown" in hist else hist["git_sha"])
    series = data["series"] if "series" in data else pd.Series("", index=data.index)
    if data["energy"].nunique() > 1:
        series = series.astype(str) + " · " + data["energy"].astype(str)
    data = data.assign(series=series.astype(str))
    order = list(dict.fromkeys(data["shown"]))
    base = alt.Chart(data).encode(
        x=alt.X("shown:N", sort=order, title=title),
        color=alt.Color("series:N", title="label"),
    )
    line = base.mark_line(point=alt.OverlayMarkDef(filled=True, size=70)).encode(
        y=alt.Y(
            f"{metric}:Q",
            title=axis_title(metric, has_est, short=True),
            scale=alt.Scale(zero=False),
        ),
        tooltip=[
            alt.Tooltip("shown:N", title=title.split(" (")[0]),
            alt.Tooltip("series:N", title="label"),
            "energy:N",
            alt.Tooltip(f"{metric}:Q", format=".4~g"),
            "n_repeats:Q",
            *(["interval:N", "trust:N"] if "trust" in data else []),
        ],
    )
    bars = base.mark_rule().encode(y=f"{metric}_ci_low:Q", y2=f"{metric}_ci_high:Q")
    return alt.layer(bars, line).properties(height=280)


def power_limit_chart(table: pd.DataFrame, knee_w: float | None, energy: str) -> alt.LayerChart:
    """One power-limit sweep: time per million tokens against J/token, each limit a point
    coloured by its watts, the Pareto front as a step line and the knee ringed
    (`greenbench.reporting.limit_sweep`'s per-limit table)."""
    data = table.assign(knee=table["limit_w"] == knee_w, time_vs_highest=table["slowdown"] - 1.0)
    x = alt.X("seconds_per_mtok:Q", title="time per million tokens (s) — lower is better",
              scale=alt.Scale(zero=False))  # fmt: skip
    y = alt.Y("joules_per_token:Q", title=f"J/token, {energy} — lower is better",
              scale=alt.Scale(zero=False))  # fmt: skip
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=120, stroke="black")
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "limit_w:Q", title="power limit (W)", scale=alt.Scale(scheme="viridis")
            ),
            tooltip=[
                alt.Tooltip("limit_w:Q", title="limit (W)"),
                alt.Tooltip("tokens_per_s:Q", format=",.0f"),
                alt.Tooltip("joules_per_token:Q", format=".4~g"),
                alt.Tooltip("time_vs_highest:Q", format="+.1%", title="time vs highest"),
                alt.Tooltip("saving:Q", format="+.1%", title="J/token saved vs highest"),
                "on_front:N",
            ],
        )
    )
    front = (
        alt.Chart(data[data["on_front"]].sort_values("seconds_per_mtok"))
        .mark_line(interpolate=step_interpolation("min"), color="black", strokeDash=[4, 3])
        .encode(x=x, y=y, order="seconds_per_mtok:Q")
    )
    knee = (
        alt.Chart(data[data["knee"]])
        .mark_point(size=600, color="red", strokeWidth=2)
        .encode(x=x, y=y)
    )
    labels = (
        alt.Chart(data)
        .mark_text(align="left", dx=9, dy=-9, fontSize=11)
        .encode(x=x, y=y, text=alt.Text("limit_w:Q", format=".0f"))
    )
    return alt.layer(front, points, knee, labels).properties(height=420)
