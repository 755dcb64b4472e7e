"""Views built for each workload's question, generic over the `workload` column.

A comparison names the workload, the setting on the x axis and the one that tells the lines
apart; a workload with no runs yet shows an empty state with the command that creates them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from greenbench.dashboard_app import apart_views, charts, data, marking


@dataclass(frozen=True, slots=True)
class Comparison:
    workload: str
    title: str
    question: str
    x: str  # board column on the x axis
    color: str  # board column that separates the series
    predictions: bool = False  # show the planner's predictions next to the measurements


COMPARISONS: dict[str, Comparison] = {
    c.workload: c
    for c in (
        Comparison(
            "transformer-vs-mamba",
            "Transformer vs Mamba over sequence length",
            "Does a state-space model train more tokens per joule than a Transformer of "
            "the same size, and at which sequence length does it win?",
            x="seq_len",
            color="model_family",
        ),
        Comparison(
            "data-parallel",
            "Data-parallel strategies over length skew",
            "How much do ranks wait when sequence lengths are skewed, and what does the "
            "waiting cost in joules?",
            x="lengths",
            color="strategy",
        ),
        Comparison(
            "fsdp-vs-odc",
            "FSDP vs ODC over length skew",
            "With skewed post-training lengths, how much throughput and energy does "
            "On-Demand Communication save over FSDP's per-microbatch collectives?",
            x="lengths",
            color="strategy",
        ),
        Comparison(
            "hybrid",
            "Hybrid layouts side by side, with the planner's predictions",
            "For a model and a device count, which DP × TP × PP × CP layout is fastest, "
            "leanest in memory, and spends the fewest joules per token?",
            x="layout",
            color="model_size",
            predictions=True,
        ),
        Comparison(
            "skippipe",
            "SkipPipe vs full pipeline",
            "With heterogeneous or failing nodes, how much iteration time does "
            "skip-scheduled pipelining save, and what does it cost in loss?",
            x="strategy",
            color="layout",
        ),
    )
}

LENGTH_ORDER = ("fixed", "uniform", "longalign", "swe-smith")


def planner_predictions(config: object) -> dict[str, object]:
    """Predicted figures stored with a run's config: ``config["prediction"]`` (a dict) and any
    ``plan.*`` setting. Empty when the run was not planned."""
    cfg = json.loads(config) if isinstance(config, str) else config
    if not isinstance(cfg, dict):
        return {}
    out: dict[str, object] = {}
    if isinstance(cfg.get("prediction"), dict):
        out |= {f"predicted {k}": v for k, v in cfg["prediction"].items()}
    settings = cfg.get("settings") if isinstance(cfg.get("settings"), dict) else {}
    out |= {k: v for k, v in settings.items() if k.startswith("plan.")}
    return out


def _predictions_table(db: Path, rows: pd.DataFrame) -> None:
    records = []
    for _, row in rows.iterrows():
        rec = data.run_record(db, str(row["latest_run_id"]))
        pred = planner_predictions(rec.get("config")) if rec else {}
        records.append(
            {
                "layout": row["layout"],
                "tokens/s (measured)": row["tokens_per_s"],
                "peak mem MiB": row["peak_mem_bytes"] / 2**20,
                "J/token": row["joules_per_token"],
                "energy": row["energy"],
                **pred,
            }
        )
    table = pd.DataFrame(records)
    if not any(c.startswith(("predicted", "plan.")) for c in table.columns):
        st.caption("No planner predictions are stored with these runs.")
    st.dataframe(
        marking.style_marked(
            table, rows["energy_measured"].reset_index(drop=True), ("J/token", "energy")
        ),
        hide_index=True,
        placeholder=marking.MISSING,
    )


def of_question(rows: pd.DataFrame, comp: Comparison) -> pd.DataFrame:
    """The rows a comparison covers: its workload's, and for SkipPipe every SkipPipe run (a
    simulated one may belong to any workload)."""
    if rows.empty:
        return rows
    keep = rows["workload"] == comp.workload
    if comp.workload == "skippipe":
        keep |= rows["strategy"] == "skippipe"
    return rows[keep]


def comparison_view(
    db: Path,
    board: pd.DataFrame,
    comp: Comparison,
    modelled: pd.DataFrame | None = None,
    skipping: pd.DataFrame | None = None,
) -> None:
    """One comparison's charts and table. SkipPipe's also holds the runs that skip stages
    (``skipping``, off the leaderboard), each with its visited share and useful tokens/s."""
    st.markdown(f"### {comp.title}")
    st.caption(comp.question)
    mine = board[board["workload"] == comp.workload]
    if comp.workload == "skippipe" and skipping is not None and len(skipping):
        mine = pd.concat([mine, skipping[skipping["workload"] == comp.workload]])
    rows = marking.with_labels(mine.reset_index(drop=True))
    sims = marking.with_labels(of_question(modelled, comp)) if modelled is not None else None
    if rows.empty:
        if sims is not None and len(sims):
            st.info(
                f"No measured runs of this workload yet: {len(sims)} simulated configuration(s) "
                f"below, apart. `greenbench run --workload {comp.workload}` measures it."
            )
            apart_views.modelled_section(sims, key=f"sim_{comp.workload}")
        else:
            st.info(
                f"No runs of this workload yet. Create them with "
                f"`greenbench run --workload {comp.workload}`."
            )
        return
    if comp.x == "lengths":
        known = [v for v in LENGTH_ORDER if v in set(rows["lengths"])]
        rows["lengths"] = pd.Categorical(
            rows["lengths"], [*known, *sorted(set(rows["lengths"]) - set(known))], ordered=True
        )
        rows = rows.sort_values("lengths")
    left, right = st.columns(2)
    left.altair_chart(
        charts.comparison_chart(rows, comp.x, "joules_per_token", comp.color), width="stretch"
    )
    right.altair_chart(
        charts.comparison_chart(rows, comp.x, "tokens_per_s", comp.color), width="stretch"
    )
    if comp.predictions:
        _predictions_table(db, rows)
    else:
        table = pd.DataFrame(
            {
                "configuration": rows["config_name"],
                marking.heading(comp.x): rows[comp.x].map(marking.text_cell),
                marking.heading(comp.color): rows[comp.color].map(marking.text_cell),
                "J/token": rows["joules_per_token"],
                "tokens/s": rows["tokens_per_s"],
                "wait fraction": rows["wait_fraction"],
                "loss": rows["loss"],
                "repeats": rows["n_repeats"],
                "trust": rows["trust"],
                "energy": rows["energy"],
            }
        ).reset_index(drop=True)
        if comp.workload == "skippipe":
            visited = (1 - rows["skipped_fraction"].fillna(0)).reset_index(drop=True)
            table.insert(5, "visited share", visited)
            table.insert(6, "useful tokens/s", table["tokens/s"] * visited)
            st.caption(
                "A run that skips stages trains each token through part of the model: useful "
                "tokens/s (tokens/s × its visited share) compares it with a full pipeline, "
                "where tokens/s and J/token cannot; these runs are off the leaderboard."
            )
        st.caption(marking.interval_note(rows["n_repeats"]))
        st.dataframe(
            marking.style_marked(table, rows["energy_measured"], ("J/token", "energy")),
            hide_index=True,
            placeholder=marking.MISSING,
        )
    if sims is not None and len(sims):
        apart_views.modelled_section(sims, key=f"sim_{comp.workload}")


def comparisons_tab(
    db: Path,
    board: pd.DataFrame,
    modelled: pd.DataFrame | None = None,
    skipping: pd.DataFrame | None = None,
) -> None:
    st.subheader("Comparisons")
    st.caption(
        "One view per workload question; filters in the sidebar apply. " + marking.ESTIMATE_NOTE
    )
    for comp in COMPARISONS.values():
        comparison_view(db, board, comp, modelled, skipping)
        st.divider()
