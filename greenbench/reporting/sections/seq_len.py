"""The report's Transformer-vs-Mamba section: J/token and tokens/s against sequence length, one
line per model and energy kind (the `transformer-vs-mamba` workload's rows of the leaderboard)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from greenbench.reporting import figures
from greenbench.reporting.section import ReportContext
from greenbench.vocabulary.trust import interval_caption

WORKLOAD = "transformer-vs-mamba"
PNG = "transformer-vs-mamba-seq-len.png"


class SeqLenSection:
    """`ReportSection`: the two families over sequence length."""

    name = "transformer-vs-mamba"
    order = 30
    doc = "Transformer against Mamba: J/token and tokens/s over sequence length"

    def applies(self, context: ReportContext) -> bool:
        """Where the leaderboard holds the workload's measured runs."""
        return not context.table.empty and WORKLOAD in set(context.table["workload"])

    def render(self, context: ReportContext) -> list[str]:
        """The plot and what its energy figures and error bars are."""
        rows = context.table[context.table["workload"] == WORKLOAD]
        return [
            "",
            "## Transformer vs Mamba over sequence length",
            "",
            *seq_len_lines(rows, context.out_dir),
        ]


def seq_len_lines(table: pd.DataFrame, out_dir: Path) -> list[str]:
    """The section's body over the workload's leaderboard rows; writes its PNG."""
    fig = Figure(figsize=(11.0, 4.4))
    ax_e, ax_t = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    keys = ["model_family", "model_size", "energy", "device_type", "devices"]
    for j, (key, g) in enumerate(table.groupby(keys, sort=True, dropna=False)):
        g = g.sort_values("seq_len")
        label = f"{key[0]}/{key[1]} ({key[2]})"
        style = {"color": f"C{j}", "marker": "o", "label": label}
        err = np.vstack([g["jpt"] - g["jpt_lo"], g["jpt_hi"] - g["jpt"]])
        ax_e.errorbar(g["seq_len"], g["jpt"], yerr=err, capsize=3, **style)
        ax_t.plot(g["seq_len"], g["tokens_per_s"], **style)
    energies = " / ".join(sorted(set(table["energy"])))
    ax_e.set_ylabel(f"J/token, {energies}")
    ax_t.set_ylabel("tokens/s")
    for ax in (ax_e, ax_t):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length (tokens)")
        ax.legend(fontsize=7)
    ax_e.set_title(f"energy per token: median, bars {figures.bars(table)}")
    ax_t.set_title("throughput (median)")
    figures.save(fig, out_dir / PNG)
    return [
        f"![J/token and tokens/s against sequence length]({PNG})",
        "",
        f"Energy figures: {energies}. Error bars: {interval_caption(table['n_repeats'])}.",
    ]
