"""The report's leaderboard: one row per configuration and kind of energy figure (medians of the
newest commit's repeats, with their interval and trust), then what its intervals are and which
configurations shared the machine or have no net energy; and which configurations are left off
because they train only part of the model per token (ranked in the SkipPipe section instead)."""

from __future__ import annotations

import math

import pandas as pd

from greenbench.reporting.cells import PARTIAL, g, partial, row
from greenbench.reporting.leaderboard import partial_model_mask
from greenbench.reporting.section import ConfigLink, ReportContext
from greenbench.vocabulary.flops import SHOWN, mfu_header
from greenbench.vocabulary.trust import CONTENDED, Trust, interval_caption


class LeaderboardSection:
    """`ReportSection`: the leaderboard table and its notes."""

    name = "leaderboard"
    order = 10
    doc = "every measured training configuration ranked within its workload and energy kind"

    def applies(self, context: ReportContext) -> bool:
        """Where a measured training run is stored."""
        return not context.table.empty

    def render(self, context: ReportContext) -> list[str]:
        """The table and the notes under it."""
        return [
            "",
            "## Leaderboard",
            "",
            *table_lines(context.table, context.link),
            *notes(context.table),
            *skipping_note(context.measured),
        ]


def skipping_note(measured: pd.DataFrame) -> list[str]:
    """Under the leaderboard: the configurations left off it because they train part of the
    model per token (SkipPipe skipping stages), and why."""
    if measured.empty:
        return []
    runs = measured.drop_duplicates("config_key")
    names = sorted(set(runs[partial_model_mask(runs)]["config_name"].astype(str)))
    if not names:
        return []
    return [
        "",
        f"> {PARTIAL}: {len(names)} configuration(s) are not on this leaderboard: SkipPipe "
        "schedules whose microbatches skip stages train only part of the model per token, so "
        "their tokens/s and J/token pay for less work than a full-model run's and ranking them "
        "here would put unequal work side by side. They are ranked within their own question in "
        "the SkipPipe section, against a full pipeline and a straggler-aware full pipeline, on "
        "useful tokens (the share of the (token, block) work they ran) beside the plain "
        "figures, with the loss beside each; where they trained to a target loss, they are "
        "ranked with every run on energy and time to it (the section on runs to a target, and "
        "its Pareto front): " + ", ".join(f"`{n}`" for n in names) + ".",
    ]


def table_lines(table: pd.DataFrame, link: ConfigLink | None = None) -> list[str]:
    """The leaderboard's Markdown table; each configuration's name a link to its page where
    ``link`` gives one."""
    lines = [
        "| workload | configuration | layout | devices | energy | J/token (median [interval]) "
        f"| tokens/s | {mfu_header(SHOWN)} | peak mem (MiB) | repeats | trust |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    one_device_type = table["device_type"].nunique() == 1  # then the header names it
    for r in table.itertuples():
        device = f"×{r.devices}" if one_device_type else f"{r.device_type} ×{r.devices}"
        jpt = f"{g(r.jpt)} [{g(r.jpt_lo)}, {g(r.jpt_hi)}]"
        value = getattr(r, SHOWN.mfu_column)
        mfu = "n/a" if math.isnan(value) else f"{value:.1%}"
        name = (
            f"{r.config_name} ({partial(r.skipped_fraction)})" if r.partial_model else r.config_name
        )
        href = link(str(r.config_key), str(r.energy_source)) if link else None
        if href:  # brackets in a name would end the link's text early
            name = "[" + name.replace("[", "\\[").replace("]", "\\]") + f"]({href})"
        cells = [r.workload, name, r.layout, device, r.energy, jpt]
        cells += [g(r.tokens_per_s), mfu]
        cells += [g(r.peak_mem_mib), str(r.n_repeats), r.trust]
        lines.append(row(cells))
    return lines


def notes(table: pd.DataFrame) -> list[str]:
    """Under the leaderboard: what its intervals are, and which configurations shared the
    machine or have no net energy (with why)."""
    lines = ["", f"Interval: {interval_caption(table['n_repeats'])}."]
    lines += [
        "",
        "Rows are ranked within each workload and kind of energy figure only: a workload's tokens "
        "are not another's.",
    ]
    trusts = {r.config_name: Trust.of(r._asdict()) for r in table.itertuples(index=False)}
    busy = {name: t for name, t in trusts.items() if t.contended}
    if busy:
        lines += [
            "",
            f"> {CONTENDED}: {len(busy)} of {len(trusts)} configurations measured while the "
            "machine was shared; their figures may be skewed (rerun them on a quiet machine):",
        ]
        lines += [f"> - `{name}`: {t.contention.text}" for name, t in busy.items()]
    unknown = [name for name, t in trusts.items() if t.idle.state == "unreliable"]
    if unknown:
        names = ", ".join(f"`{n}`" for n in unknown)
        lines += [
            "",
            f"> Net energy unknown for {names}: their idle baseline was sampled while the machine "
            "was busy, or above the window's mean power (`greenbench show RUN_ID` says which).",
        ]
    return lines
