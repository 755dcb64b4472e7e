"""The report's Pareto section: tokens/s against J/token, one plot and front per workload and
kind of energy figure, each front point named; a partial-model run is drawn but on no front, and
a configuration measured on a shared machine is marked, never left out.

Where runs trained to a target loss, a second front beside it: time against energy to the
target (medians over seeds, `greenbench.reporting.to_target`), on which a partial-model run IS
ranked: reaching a common loss is the same work, whatever a run spends per token."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from greenbench.reporting import figures
from greenbench.reporting.cells import ESTIMATE_FOLLOWS_TIME, PARTIAL
from greenbench.reporting.leaderboard import comparable_front
from greenbench.reporting.section import ReportContext
from greenbench.reporting.sections.to_target import reported_rows
from greenbench.reporting.to_target import (
    distinct_names,
    seed_rows,
    target_board,
    target_front,
)
from greenbench.vocabulary.trust import CONTENDED, flagged


class ParetoSection:
    """`ReportSection`: speed against energy, with the fronts."""

    name = "pareto"
    order = 20
    doc = "tokens/s against J/token per workload and energy kind, with each Pareto front"

    def applies(self, context: ReportContext) -> bool:
        """Where a measured training run is stored."""
        return not context.table.empty

    def render(self, context: ReportContext) -> list[str]:
        """The plot (pareto.png) and each front's configurations; where runs trained to a
        target, the front of time against energy to it (pareto-to-target.png)."""
        lines = [
            "",
            "## Speed against energy (Pareto front)",
            "",
            *pareto_lines(context.table, context.out_dir),
        ]
        board = target_board(seed_rows(reported_rows(context.db_path, context.raw)))
        return lines + to_target_lines(board, context.out_dir)


def pareto_lines(table: pd.DataFrame, out_dir: Path) -> list[str]:
    """The section's body over the leaderboard ``table``; writes ``pareto.png``."""
    usable = table.dropna(subset=["jpt", "tokens_per_s"])
    if usable.empty:
        return ["No configuration has both an energy and a throughput figure."]
    # one front per workload and energy source: an estimate never knocks a measurement off a
    # front, one workload's tokens are not another's, and a partial-model run is on none
    fronts = comparable_front(
        usable, "tokens_per_s", "jpt", "max", "min", by=("workload", "energy")
    )
    groups = list(usable.groupby(["workload", "energy"], sort=True))
    cols = min(len(groups), 3)
    rows = math.ceil(len(groups) / cols)
    fig = Figure(figsize=(5.6 * cols, 4.6 * rows), layout="constrained")
    lines = []
    for i, ((workload, energy), g) in enumerate(groups):
        ax = fig.add_subplot(rows, cols, i + 1)
        front = fronts[g.index]
        partial = g["partial_model"].astype(bool)
        whole = g[~partial]
        ax.scatter(
            whole["tokens_per_s"], whole["jpt"], marker="o", color="C0",
            facecolors="none" if energy == "estimate" else None, label="configuration",
        )  # fmt: skip
        if partial.any():
            ax.scatter(g[partial]["tokens_per_s"], g[partial]["jpt"], marker="s", color="C7",
                       label=f"{PARTIAL} (off the front)")  # fmt: skip
        f = g[front].sort_values("tokens_per_s")
        ax.step(f["tokens_per_s"], f["jpt"], where="post", color="k", ls="--", lw=1)
        ax.scatter(
            f["tokens_per_s"], f["jpt"], s=160, facecolors="none", edgecolors="k", label="front"
        )
        shorts = dict(zip(g.index, figures.short_labels(list(g["config_name"]))[0], strict=True))
        middle = (g["tokens_per_s"].min() + g["tokens_per_s"].max()) / 2
        for k, r in f.iterrows():  # each front point named, short, towards the plot's inside
            right = r["tokens_per_s"] > middle
            ax.annotate(shorts[k], (r["tokens_per_s"], r["jpt"]), textcoords="offset points",
                        xytext=(-6 if right else 6, 6), ha="right" if right else "left",
                        fontsize=7)  # fmt: skip
        busy = g[g["contended"].map(flagged)]
        if len(busy):  # marked, never left out: the user judges them
            ax.scatter(busy["tokens_per_s"], busy["jpt"], s=260, marker="x", color="C3",
                       label=CONTENDED)  # fmt: skip
        figures.maybe_log(ax, g["tokens_per_s"], g["jpt"])
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.set_xlabel("tokens/s (higher is better)")
        ax.set_ylabel(f"J/token, {energy} (lower is better)")
        ax.set_title(figures.wrap(f"{workload}, energy: {energy}", 48), fontsize=9)
        ax.legend(fontsize=7)
        names = ", ".join(
            f"`{n}`" + (f" ({CONTENDED})" if flagged(c) else "")
            for n, c in zip(f["config_name"], f["contended"], strict=True)
        )
        lines.append(f"- Pareto front, `{workload}`, energy {energy}: {names}")
        if energy == "estimate":
            lines.append(f"  - its J/token is an {ESTIMATE_FOLLOWS_TIME}: read it as speed")
        if partial.any():
            off = ", ".join(f"`{n}`" for n in g[partial]["config_name"])
            lines.append(f"  - off the front ({PARTIAL}, not comparable on J/token): {off}")
    figures.save(fig, out_dir / "pareto.png")
    return [
        "![Pareto plots: tokens/s against J/token, one per workload and energy](pareto.png)",
        "",
        "One front per workload and kind of energy figure (a workload's tokens are not "
        f"another's); a {PARTIAL} run (SkipPipe skipping stages) is drawn but on no front.",
        "",
        *lines,
    ]


def to_target_lines(board: pd.DataFrame, out_dir: Path) -> list[str]:
    """Time against energy to the target over ``board`` (`to_target.target_board`), one plot
    and front per workload and energy label, partial-model runs ranked on it; writes
    ``pareto-to-target.png``. None where no configuration trained to a target."""
    if board.empty:
        return []
    head = ["", "### Time against energy to a target loss", ""]
    board = board.assign(config_name=distinct_names(board))
    front = target_front(board)
    drawn = board[_finite(board)]
    if drawn.empty:
        return [*head, "No configuration's median seed reached its target: no front to draw."]
    lines: list[str] = []
    groups = list(drawn.groupby(["workload", "energy"], sort=True))
    cols = min(len(groups), 3)
    rows = math.ceil(len(groups) / cols)
    fig = Figure(figsize=(5.6 * cols, 4.6 * rows), layout="constrained")
    for i, ((workload, energy), g) in enumerate(groups):
        ax = fig.add_subplot(rows, cols, i + 1)
        _interval_bars(ax, g)
        partial = g["partial_model"].astype(bool)
        ax.scatter(g[~partial]["seconds_to_target"], g[~partial]["energy_to_target_j"],
                   marker="o", color="C0", label="configuration",
                   facecolors="none" if energy == "estimate" else None)  # fmt: skip
        if partial.any():
            ax.scatter(g[partial]["seconds_to_target"], g[partial]["energy_to_target_j"],
                       marker="s", color="C2", label=f"{PARTIAL} (ranked here)")  # fmt: skip
        f = g[front[g.index]].sort_values("seconds_to_target")
        ax.step(f["seconds_to_target"], f["energy_to_target_j"], where="post", color="k",
                ls="--", lw=1)  # fmt: skip
        ax.scatter(f["seconds_to_target"], f["energy_to_target_j"], s=160, facecolors="none",
                   edgecolors="k", label="front")  # fmt: skip
        shorts = dict(zip(g.index, figures.short_labels(list(g["config_name"]))[0], strict=True))
        for k, r in f.iterrows():
            ax.annotate(shorts[k], (r["seconds_to_target"], r["energy_to_target_j"]),
                        textcoords="offset points", xytext=(6, 6), fontsize=7)  # fmt: skip
        ax.set_xlabel("time to target (s, lower is better)")
        ax.set_ylabel(f"energy to target (J), {energy} (lower is better)")
        ax.set_title(figures.wrap(f"{workload}, energy: {energy}", 48), fontsize=9)
        ax.legend(fontsize=7)
        names = ", ".join(f"`{n}`" for n in f["config_name"])
        lines.append(f"- Pareto front to target, `{workload}`, energy {energy}: {names}")
        if energy == "estimate":
            lines.append(f"  - its energy is an {ESTIMATE_FOLLOWS_TIME}")
        if partial.any():
            ranked = ", ".join(f"`{n}`" for n in g[partial]["config_name"])
            lines.append(f"  - ranked on this front, though off the J/token one ({PARTIAL}): "
                         f"{ranked}")  # fmt: skip
    figures.save(fig, out_dir / "pareto-to-target.png")
    missed = board[~_finite(board)]
    if len(missed):
        lines.append(
            "- not drawn, their median seed did not reach the target: "
            + ", ".join(f"`{n}`" for n in missed["config_name"])
        )
    return [
        *head,
        "![Time against energy to a target loss, one plot per workload and energy]"
        "(pareto-to-target.png)",
        "",
        "Medians over seeds, bars their interval over seeds (a 95 % CI from 6 seeds, else the "
        "min–max range). Every configuration that reached the target is ranked, SkipPipe runs "
        "that skip stages included: reaching the same loss is the same work.",
        "",
        *lines,
    ]


def _finite(board: pd.DataFrame) -> pd.Series:
    """Rows whose median time and energy to target are figures (the median seed reached)."""
    t = pd.to_numeric(board["seconds_to_target"], errors="coerce")
    e = pd.to_numeric(board["energy_to_target_j"], errors="coerce")
    return pd.Series(np.isfinite(t) & np.isfinite(e), index=board.index)


def _interval_bars(ax, g: pd.DataFrame) -> None:  # type: ignore[no-untyped-def]
    """Each point's interval over seeds on both axes (an end that did not reach: left out)."""
    for _, r in g.iterrows():
        for lo, hi, vertical in (
            (r["seconds_to_target_low"], r["seconds_to_target_high"], False),
            (r["energy_to_target_j_low"], r["energy_to_target_j_high"], True),
        ):
            if not (np.isfinite(lo) and np.isfinite(hi)) or lo == hi:
                continue
            if vertical:
                ax.vlines(r["seconds_to_target"], lo, hi, color="C7", lw=1)
            else:
                ax.hlines(r["energy_to_target_j"], lo, hi, color="C7", lw=1)
