"""The report's section on runs to a target loss: each configuration's energy and time to the
target over its seeds (`greenbench.reporting.to_target`), then what the runs say about model
families, SkipPipe and the data-parallel strategies (`greenbench.reporting.target_findings`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from greenbench.reporting.cells import ESTIMATE_FOLLOWS_TIME, partial, row
from greenbench.reporting.section import ReportContext
from greenbench.reporting.target_findings import (
    DATA_PARALLEL,
    curve_findings,
    family_findings,
    skippipe_findings,
)
from greenbench.reporting.target_rows import curves, target_rows
from greenbench.reporting.to_target import (
    LABELS,
    cell,
    distinct_names,
    number,
    seed_rows,
    seeds_caption,
    spread,
    target_board,
    target_text,
)
from greenbench.vocabulary.trust import CONTENDED

HEADINGS = [
    "configuration", "target loss", "reached", LABELS["energy_to_target_j"],
    LABELS["energy_to_target_net_j"], LABELS["seconds_to_target"], LABELS["tokens_to_target"],
    LABELS["steps_to_target"], "evaluation (s)", "energy",
]  # fmt: skip


def reported_rows(db_path: str | Path, raw: pd.DataFrame) -> pd.DataFrame:
    """The repeats to a target of the runs a report covers (``raw``'s run ids)."""
    rows = target_rows(db_path)
    if rows.empty or "run_id" not in raw:
        return rows.iloc[0:0]
    return rows[rows["run_id"].isin(set(raw["run_id"]))]


def name_cell(r: pd.Series) -> str:
    """A configuration's name, with its partial-model and contention markers."""
    marks = [partial(float(r["skipped_fraction"]))] if r["partial_model"] else []
    if r["contended"]:
        marks.append(CONTENDED)
    return f"`{r['config_name']}`" + (f" ({'; '.join(marks)})" if marks else "")


def table_lines(board: pd.DataFrame) -> list[str]:
    """One Markdown table row per configuration (`HEADINGS`)."""
    lines = [row(HEADINGS), row(["---"] * len(HEADINGS))]
    for _, r in board.assign(config_name=distinct_names(board)).iterrows():
        best = float(r["best_not_reached"])
        lines.append(
            row(
                [
                    name_cell(r),
                    target_text(r),
                    f"{r['n_reached']}/{r['n_seeds']} seeds",
                    *(cell(spread(r, f), best) for f in (
                        "energy_to_target_j", "energy_to_target_net_j", "seconds_to_target",
                        "tokens_to_target", "steps_to_target")),
                    number(float(r["eval_s"])),
                    r["energy"],
                ]
            )
        )  # fmt: skip
    return lines


def findings_lines(board: pd.DataFrame, seeds: pd.DataFrame, val: pd.DataFrame) -> list[str]:
    """What the runs say (`greenbench.reporting.target_findings`), a heading per question
    the database can answer."""
    lines: list[str] = []
    families = family_findings(board)
    if families:
        lines += ["", "**Model families** (single rank, otherwise the same settings):", ""]
        lines += [line for f in families for line in f.lines()]
    skipping = skippipe_findings(board)
    if skipping:
        lines += [
            "",
            "**SkipPipe against the straggler-aware full pipeline** (the full pipeline that "
            "leaves the straggler out; same settings and straggler):",
            "",
        ]
        lines += [line for f in skipping for line in f.lines()]
    agreeing = curve_findings(seeds, val)
    if agreeing:
        lines += [
            "",
            "**DDP, FSDP and ODC train the same model** (the same minibatches from the same "
            "initialisation, so their validation losses at equal steps should agree up to "
            "rounding):",
            "",
        ]
        lines += [line for f in agreeing for line in f.lines()]
    return ["", "### What the runs say", *lines] if lines else []


def section_lines(seeds: pd.DataFrame, val: pd.DataFrame) -> list[str]:
    """The section over the seeds of runs to a target (`to_target.seed_rows`) and their
    validation curves (none: no lines)."""
    board = target_board(seeds)
    if board.empty:
        return []
    lines = [
        "",
        "## Energy to a target loss",
        "",
        "Each run trains from initialisation until its loss on a held-out set reaches the "
        "target, or its budget ends it. Time and energy to target are those of training; the "
        "evaluations are measured apart (evaluation seconds, beside). A configuration pools its "
        "seeds (runs that differ only in their seed), each seed the median over its repeats. A "
        "run that did not reach the target took more than its budget, so it counts above every "
        "run that did: where the median falls on one the cell reads `not reached` with the best "
        "validation loss such a run got to, never a figure it did not reach. Runs that skip "
        "stages per token (SkipPipe), kept off the J/token leaderboard, are ranked here: "
        "reaching the loss is the same work whatever it costs per token.",
        "",
        *table_lines(board),
        "",
        seeds_caption(board["n_seeds"]),
    ]
    if (board["energy"] == "estimate").any():
        lines += ["", f"Energy labelled estimate is an {ESTIMATE_FOLLOWS_TIME}."]
    return lines + findings_lines(board, seeds, val)


class ToTargetSection:
    """`ReportSection`: energy and time to a target loss over seeds, and what they say."""

    name = "to-target"
    order = 65
    doc = "energy and time to a target loss over seeds; what families, SkipPipe, DDP/FSDP/ODC show"

    def applies(self, context: ReportContext) -> bool:
        """Every report: the section is empty where none of its runs trained to a target."""
        return True

    def render(self, context: ReportContext) -> list[str]:
        """The table and the findings (none where no run trained to a target)."""
        rows = reported_rows(context.db_path, context.raw)
        if rows.empty:
            return []
        seeds = seed_rows(rows)
        wanted = list(seeds[seeds["strategy"].isin(DATA_PARALLEL)]["run_id"])
        return section_lines(seeds, curves(context.db_path, wanted))
