"""The report's Pareto section: tokens/s against J/token, one plot and front per workload and
kind of energy figure, each front point named; a partial-model run is drawn but on no front, and
a configuration measured on a shared machine is marked, never left out."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from greenbench.reporting import figures
from greenbench.reporting.cells import ESTIMATE_FOLLOWS_TIME, PARTIAL
from greenbench.reporting.leaderboard import comparable_front
from greenbench.reporting.section import ReportContext
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
        """The plot (pareto.png) and each front's configurations."""
        return [
            "",
            "## Speed against energy (Pareto front)",
            "",
            *pareto_lines(context.table, context.out_dir),
        ]


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
