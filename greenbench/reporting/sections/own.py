"""The report's table of a user's own measurements (`greenbench measure`): an own loop or a
whole process, never ranked beside the training workloads, compared only with themselves."""

from __future__ import annotations

import pandas as pd

from greenbench.reporting.cells import g, row
from greenbench.reporting.section import ReportContext
from greenbench.vocabulary import OWN_MEASUREMENT_KINDS, energy_label
from greenbench.vocabulary.trust import interval_caption


class OwnMeasurementsSection:
    """`ReportSection`: the user's own measurements."""

    name = "own-measurements"
    order = 80
    doc = "your own measurements (`greenbench measure`), in a table of their own"

    def applies(self, context: ReportContext) -> bool:
        """Where the runs reported hold an own measurement."""
        return not context.own.empty

    def render(self, context: ReportContext) -> list[str]:
        """The table and its interval."""
        return own_lines(context.own)


def own_lines(own: pd.DataFrame) -> list[str]:
    """The section over the own-measurement rows ``own`` (its board, one row per name)."""
    lines = [
        "",
        "## Your own measurements (`greenbench measure`)",
        "",
        "What you measured yourself: an own loop (`greenbench.measure`, your training loop after "
        "its warm-up steps) or a whole process (`greenbench measure -- CMD`, everything the "
        "command did from start to exit: start-up, data loading and evaluation included). Tokens "
        "are what you declared. These are not training windows of greenbench's workloads, so "
        "they are kept off the leaderboard and the Pareto fronts and are compared only with "
        "themselves.",
        "",
        "| kind | name | device | energy | J/token (median [interval]) | tokens/s | repeats "
        "| trust |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in own.sort_values(["strategy", "config_name"]).itertuples():
        energy = energy_label(r.energy_source, r.energy_measured)
        jpt = f"{g(r.joules_per_token)} [{g(r.joules_per_token_ci_low)}, "
        jpt += f"{g(r.joules_per_token_ci_high)}]"
        device = f"{r.device_type} ×{g(r.devices)}"
        cells = [
            OWN_MEASUREMENT_KINDS.get(r.strategy, r.strategy),
            r.config_name,
            device,
            energy,
            jpt,
        ]
        cells += [g(r.tokens_per_s), str(r.n_repeats), r.trust]
        lines.append(row(cells))
    lines += ["", f"Interval: {interval_caption(own['n_repeats'])}."]
    return lines
