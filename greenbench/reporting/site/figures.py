"""Which of the report's figures a published site draws as interactive charts, and from what.

The report's sections write PNGs and link them from their Markdown; the site keeps every
section's text and tables as they are and, where the figure's data is the leaderboard the
context holds (the Pareto plot, the Transformer-vs-Mamba curves, each workload's bars), draws
it instead as a Vega-Lite chart from the same rows, grouped as the PNG is (one front per
workload and energy label, by `leaderboard.comparable_front`). Any other figure stays the
section's PNG, shown as an image: its labels are the report's.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from greenbench.reporting import figures
from greenbench.reporting.cells import PARTIAL
from greenbench.reporting.leaderboard import comparable_front
from greenbench.reporting.section import ReportContext
from greenbench.reporting.sections.seq_len import PNG as SEQ_LEN_PNG
from greenbench.reporting.sections.seq_len import WORKLOAD as SEQ_LEN_WORKLOAD
from greenbench.reporting.site import charts
from greenbench.vocabulary.trust import CONTENDED, interval_caption

#: what the marks of each kind of chart say (beneath the interval)
POINTS = (
    f"Dashed: the Pareto front, its points diamonds; ringed in red: measured while the machine "
    f"was shared ({CONTENDED}); a grey square: {PARTIAL}, on no front. Hover a point for its "
    "trust."
)
BARS = (
    f"Each bar names its energy label in brackets, and {CONTENDED} where the machine was shared "
    "while it ran. Hover a bar for its trust."
)
LINES = "One line per model and energy label. Hover a point for its trust."

#: a chart and the caption under it
Drawn = tuple[alt.TopLevelMixin, str]


def interactive(png: str, context: ReportContext) -> list[Drawn] | None:
    """The charts that stand for the report's figure ``png``, or None where the site shows the
    PNG itself."""
    table = context.table
    if table.empty:
        return None
    if png == "pareto.png":
        return pareto(table)
    if png == SEQ_LEN_PNG:
        rows = table[table["workload"] == SEQ_LEN_WORKLOAD]
        return [(charts.seq_len_chart(rows), _caption(rows, LINES))] if len(rows) else None
    for workload, rows in table.groupby("workload", sort=True):
        if png == f"workload-{figures.slug(str(workload))}.png":
            return [(charts.workload_chart(rows, str(workload)), _caption(rows, BARS))]
    return None


def pareto(table: pd.DataFrame) -> list[Drawn] | None:
    """One chart per workload and energy label, each with its own front (as ``pareto.png``)."""
    usable = table.dropna(subset=["jpt", "tokens_per_s"])
    if usable.empty:
        return None
    fronts = comparable_front(
        usable, "tokens_per_s", "jpt", "max", "min", by=("workload", "energy")
    )
    out: list[Drawn] = []
    for (workload, energy), rows in usable.groupby(["workload", "energy"], sort=True):
        chart = charts.pareto_chart(rows, fronts[rows.index], str(workload), str(energy))
        out.append((chart, _caption(rows, POINTS)))
    return out


def _caption(rows: pd.DataFrame, marks: str) -> str:
    """What a chart's interval bars are, and what its marks say."""
    return f"Interval bars: {interval_caption(rows['n_repeats'])}. {marks}"
