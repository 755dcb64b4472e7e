"""The dashboard's Quality tab, and the Pareto view's "energy to target" axis: runs that trained
to a target loss (``train.until = target``).

The tab shows, per configuration pooled over its seeds (`greenbench.reporting.to_target`), the
target, how many seeds reached it, energy (gross and net) and time to it with their interval
over seeds, tokens, steps and evaluation seconds, as the report does; energy-to-target bars with
those intervals; validation loss against training joules and seconds from every seed's curve,
the target drawn as a horizontal rule; and what the runs say (`greenbench.reporting.
target_findings`), computed, "cannot tell" included. The sidebar's filters apply. A database
without such runs gets a message saying how to make them.

On the Pareto view's to-target axis a SkipPipe run that skips stages is ranked with every other
run (it is off the J/token front): reaching the same loss is the same work.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st
from pandas.io.formats.style import Styler

from greenbench.dashboard_app import data, marking, quality_charts
from greenbench.dashboard_app.filters import Filters, apply_filters
from greenbench.reporting.cells import ESTIMATE_FOLLOWS_TIME
from greenbench.reporting.sections.to_target import findings_lines
from greenbench.reporting.target_findings import DATA_PARALLEL
from greenbench.reporting.target_rows import curves, target_rows
from greenbench.reporting.to_target import (
    ENERGY_FIGURES,
    LABELS,
    cell,
    distinct_names,
    number,
    seed_rows,
    seeds_caption,
    spread,
    target_board,
    target_front,
    target_text,
)

EMPTY = (
    "No run trained to a target loss yet. `greenbench run --suite convergence` trains each "
    "configuration from initialisation until its held-out loss reaches a common target "
    "(`--set train.until=target` does it for any built-in workload)."
)
#: the Quality table's columns
COLUMNS = (
    "configuration", "target loss", "reached", LABELS["energy_to_target_j"],
    LABELS["energy_to_target_net_j"], LABELS["seconds_to_target"], LABELS["tokens_to_target"],
    LABELS["steps_to_target"], "evaluation (s)", "energy", "trust",
)  # fmt: skip
#: the figures of the table, in its order
TABLE_FIGURES = (
    "energy_to_target_j", "energy_to_target_net_j", "seconds_to_target", "tokens_to_target",
    "steps_to_target",
)  # fmt: skip
#: the table's energy figures (on an estimate's background on an estimate's row)
ENERGY_COLUMNS = tuple(LABELS[f] for f in ENERGY_FIGURES)
#: the figures the bars can show
BAR_FIGURES = ("energy_to_target_j", "energy_to_target_net_j", "seconds_to_target")
#: the energy axes of the to-target Pareto view
PARETO_Y = ("energy_to_target_j", "energy_to_target_net_j")
#: how many configurations' curves are drawn at first (the others one click away)
FIRST_CURVES = 6


@st.cache_data(ttl=data.CACHE_TTL_S, show_spinner=False)
def _rows(db_path: str) -> pd.DataFrame:
    return target_rows(db_path)


@st.cache_data(ttl=data.CACHE_TTL_S, show_spinner=False)
def _curves(db_path: str, run_ids: tuple[str, ...]) -> pd.DataFrame:
    return curves(db_path, list(run_ids))


def seeds_of(db: Path, filters: Filters) -> pd.DataFrame:
    """The seeds of runs to a target (`to_target.seed_rows`) the sidebar's filters keep."""
    rows = _rows(str(db))
    return seed_rows(apply_filters(rows, filters) if len(rows) else rows)


def labelled(board: pd.DataFrame) -> pd.DataFrame:
    """``board`` with the dashboard's ``energy_kind``, a ``trust`` cell (partial model,
    contended) on every row, and ``config_name`` made distinct (`to_target.distinct_names`:
    a name the charts and the table tell rows apart by)."""
    out = board.assign(energy_kind=marking.kind_names(board), config_name=distinct_names(board))
    out["trust"] = [
        " · ".join(
            m for m in (
                f"{marking.PARTIAL}: skips {float(s):.0%} of its stages per token" if p else "",
                marking.trust.CONTENDED if c else "",
            ) if m
        )
        for p, s, c in zip(out["partial_model"], out["skipped_fraction"], out["contended"],
                           strict=True)
    ]  # fmt: skip
    return out


def figure_cell(row: pd.Series, figure: str) -> str:
    """One figure's cell (`to_target.cell`); an estimate's energy figure marked "≈ … (est.)"
    (a not-reached cell's best loss is no energy figure, and is not)."""
    s = spread(row, figure)
    text = cell(s, float(row["best_not_reached"]))
    if figure in ENERGY_FIGURES and s.reached:
        return marking.mark(text, bool(row["energy_measured"]))
    return text


def table(board: pd.DataFrame) -> pd.DataFrame:
    """The Quality table (`COLUMNS`): the report's cells, not-reached ones included."""
    rows = [
        [
            r["config_name"], target_text(r), f"{r['n_reached']}/{r['n_seeds']} seeds",
            *(figure_cell(r, f) for f in TABLE_FIGURES), number(float(r["eval_s"])),
            marking.energy_label(r["energy_source"], r["energy_measured"]), r["trust"],
        ]
        for _, r in board.iterrows()
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))


def styled(board: pd.DataFrame) -> Styler:
    """`table` styled: the energy cells of an estimate's row on the estimate's background, a
    contended row's trust cell marked (`marking.style_marked`)."""
    shown = table(board)
    styler = marking.style_marked(shown, board["energy_measured"], ("energy",))
    estimated = list(shown.index[~board["energy_measured"].astype(bool).to_numpy()])
    if estimated:
        figures = pd.IndexSlice[estimated, list(ENERGY_COLUMNS)]
        styler = styler.map(lambda _: marking.ESTIMATE_BG, subset=figures)
    return styler


def _empty() -> None:
    st.info(EMPTY)
    st.dataframe(pd.DataFrame(columns=list(COLUMNS)), hide_index=True, placeholder=marking.MISSING)


def quality_tab(db: Path, filters: Filters) -> None:
    st.subheader("Quality: validation loss, and energy to a target loss")
    st.caption(
        "Each run trains from initialisation until its held-out loss reaches the target or its "
        "budget ends it; time and energy are those of training (evaluations measured apart). A "
        "configuration pools its seeds; a seed that did not reach counts as above every one "
        "that did, so a median on one reads 'not reached' with the best loss such a run got "
        "to. " + marking.ESTIMATE_NOTE
    )
    seeds = seeds_of(db, filters)
    if seeds.empty:
        _empty()
        return
    board = labelled(target_board(seeds))
    st.dataframe(
        styled(board),
        hide_index=True,
        placeholder=marking.MISSING,
        key="quality_table",
    )
    st.caption(seeds_caption(board["n_seeds"]))
    if (board["energy"] == "estimate").any():
        st.caption(f"Energy marked ≈ is an {ESTIMATE_FOLLOWS_TIME}.")
    figure = st.radio(
        "bars", BAR_FIGURES, format_func=LABELS.get, horizontal=True, key="quality_bars"
    )
    st.altair_chart(quality_charts.to_target_bars(board, figure), width="stretch")
    missed = board[~board[figure].map(_finite)]
    if len(missed):
        st.caption(
            "No bar, their median seed did not reach the target: "
            + ", ".join(
                f"{r['config_name']} ({cell(spread(r, figure), float(r['best_not_reached']))})"
                for _, r in missed.iterrows()
            )
        )
    _curves_part(db, board, seeds)
    wanted = tuple(seeds[seeds["strategy"].isin(DATA_PARALLEL)]["run_id"])
    said = findings_lines(board, seeds, _curves(str(db), wanted))
    if said:
        st.markdown("\n".join(said))


def curve_lines(val: pd.DataFrame, seeds: pd.DataFrame, board: pd.DataFrame) -> pd.DataFrame:
    """The validation curves ``val`` with each point's configuration as the board names it
    (`labelled`'s distinct name), its seed and its kind of energy: a seed's run belongs to the
    board row of its seed group and energy label."""
    keys = ["seed_group", "energy"]
    meta = seeds[["run_id", "seed", *keys]].merge(
        board[[*keys, "config_name", "energy_kind"]], on=keys
    )
    return val.merge(meta, on="run_id")


def _curves_part(db: Path, board: pd.DataFrame, seeds: pd.DataFrame) -> None:
    """Validation loss against training joules and seconds of the chosen configurations."""
    names = list(board["config_name"])
    chosen = st.multiselect(
        "validation curves of", names, default=names[:FIRST_CURVES], key="quality_curves"
    )
    picked = board[board["config_name"].isin(chosen)]
    runs = seeds[seeds["seed_group"].isin(set(picked["seed_group"]))]
    val = _curves(str(db), tuple(runs["run_id"]))
    if val.empty:
        st.info("No validation curve is stored for these runs.")
        return
    shown = curve_lines(val, runs, picked)
    targets = picked[["config_name", "target_loss"]].dropna()
    for x in ("joules", "seconds"):
        st.altair_chart(quality_charts.val_curve_chart(shown, x, targets), width="stretch")
    st.caption(
        "One line per seed and repeat; the dashed rule is the configuration's target. Joules and "
        "seconds are of training only (the evaluations' own are left out)."
    )


def target_pareto_view(db: Path, filters: Filters) -> None:
    """The Pareto view on the to-target axis: time against energy to the target, medians over
    seeds, one front per workload and kind of energy, partial-model runs ranked on it."""
    seeds = seeds_of(db, filters)
    if seeds.empty:
        st.info(EMPTY)
        st.dataframe(pd.DataFrame(columns=["configuration"]), hide_index=True)
        return
    board = labelled(target_board(seeds))
    y = st.selectbox("energy", PARETO_Y, format_func=LABELS.get, key="p_target_y")
    board["on_front"] = target_front(board, y)
    board["front_group"] = board["workload"].astype(str) + " · " + board["energy_kind"]
    board["partial"] = board["partial_model"].map(
        {True: quality_charts.PARTIAL, False: quality_charts.WHOLE}
    )
    finite = board["seconds_to_target"].map(_finite) & board[y].map(_finite)
    points = board[finite]
    if points.empty:
        st.info("No configuration's median seed reached its target: nothing to rank.")
        return
    st.altair_chart(quality_charts.target_pareto_chart(points, y), width="stretch")
    partial = int(points["partial_model"].sum())
    st.caption(
        "Medians over seeds, bars their interval over seeds. "
        + (
            f"{partial} partial-model point(s) (SkipPipe skipping stages) are ranked on this "
            "front: reaching the same loss is the same work, whatever a run spends per token. "
            if partial
            else ""
        )
        + marking.ESTIMATE_NOTE
    )
    front = points[points["on_front"]].sort_values("seconds_to_target")
    st.markdown(f"**Non-dominated configurations to target** ({len(front)} of {len(points)})")
    shown = pd.DataFrame(
        {
            "configuration": front["config_name"],
            "workload": front["workload"],
            LABELS["seconds_to_target"]: front["seconds_to_target"],
            LABELS[y]: front[y],
            "energy": [marking.energy_label(s, m) for s, m in
                       zip(front["energy_source"], front["energy_measured"], strict=True)],
            "trust": front["trust"],
        }
    ).reset_index(drop=True)  # fmt: skip
    st.dataframe(
        marking.style_marked(shown, front["energy_measured"], (LABELS[y], "energy")),
        hide_index=True,
        placeholder=marking.MISSING,
    )
    missed = board[~finite]
    if len(missed):
        st.caption(
            "Not ranked, their median seed did not reach the target: "
            + ", ".join(missed["config_name"])
        )


def _finite(v: object) -> bool:
    try:
        return pd.notna(v) and abs(float(v)) != float("inf")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
