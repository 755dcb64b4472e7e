"""The report's per-workload sections: each workload's configurations as J/token and tokens/s
bars, the fewest J/token per energy kind (where energy is estimated, labelled as following time,
not as a finding of its own) and the fastest (a partial-model run never the fewest),
and, on several devices, how much of the ranks' time went to waiting for each other."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from greenbench.reporting import figures
from greenbench.reporting.cells import ESTIMATE_FOLLOWS_TIME, PARTIAL, g
from greenbench.reporting.section import ReportContext
from greenbench.vocabulary.trust import CONTENDED, flagged, interval_caption


class WorkloadsSection:
    """`ReportSection`: one section per measured workload."""

    name = "workloads"
    order = 90
    doc = "per workload: J/token and tokens/s per configuration, the best of each, rank waiting"

    def applies(self, context: ReportContext) -> bool:
        """Where a measured training run is stored."""
        return not context.table.empty

    def render(self, context: ReportContext) -> list[str]:
        """Each workload's heading and body, in name order."""
        lines: list[str] = []
        for workload, group in context.table.groupby("workload", sort=True):
            lines += ["", f"## Workload `{workload}`", ""]
            lines += workload_lines(str(workload), group, context.out_dir)
        return lines


def workload_lines(workload: str, rows: pd.DataFrame, out_dir: Path) -> list[str]:
    """One workload's body over its leaderboard ``rows``; writes its PNG."""
    order = [
        c for c in ("energy", "model_family", "strategy", "seq_len", "config_name") if c in rows
    ]
    rows = rows.sort_values(order).reset_index(drop=True)
    partial = rows["partial_model"].astype(bool)
    shorts, common = figures.short_labels(list(rows["config_name"]))
    labels = [
        f"{n} [{e}]" + (" [partial]" if p else "") + (f" {CONTENDED}" if flagged(c) else "")
        for n, e, p, c in zip(shorts, rows["energy"], partial, rows["contended"], strict=True)
    ]
    fig = Figure(figsize=(11.0, 1.6 + 0.45 * len(rows)), layout="constrained")
    ax_e, ax_t = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    pos = np.arange(len(rows))
    hatch = ["//" if e == "estimate" else "" for e in rows["energy"]]
    err = np.vstack([rows["jpt"] - rows["jpt_lo"], rows["jpt_hi"] - rows["jpt"]])
    bars = ax_e.barh(pos, rows["jpt"].fillna(0), xerr=np.nan_to_num(err), capsize=3, color="C2")
    for bar, h in zip(bars, hatch, strict=True):
        bar.set_hatch(h)
    ax_t.barh(pos, rows["tokens_per_s"], color="C0")
    ax_e.set_yticks(pos, labels, fontsize=8)
    ax_t.set_yticks(pos, [""] * len(rows))
    for ax in (ax_e, ax_t):
        ax.invert_yaxis()  # first configuration on top, reading order
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))  # ticks that do not run together
    caption = f"J/token: median, bars {figures.bars(rows)}; hatched = estimate"
    ax_e.set_xlabel(figures.wrap(caption, 50))
    ax_t.set_xlabel("tokens/s (median)")
    fig.suptitle(figures.wrap(f"{workload}: {common}" if common else workload, 110), fontsize=10)
    name = f"workload-{figures.slug(workload)}.png"
    figures.save(fig, out_dir / name)
    best = rows[~partial].dropna(subset=["jpt"]).groupby("energy")["jpt"].idxmin()
    lines = [f"![{workload}: J/token and tokens/s per configuration]({name})", ""]
    for energy, i in best.items():
        name, jpt = rows.loc[i, "config_name"], g(rows.loc[i, "jpt"])
        busy = f", {CONTENDED}" if flagged(rows.loc[i, "contended"]) else ""
        if energy == "estimate":  # not a finding of its own: the time ranking, relabelled
            lines.append(
                f"- Lowest estimated J/token: `{name}` ({jpt}; {ESTIMATE_FOLLOWS_TIME}{busy})"
            )
        else:
            lines.append(f"- Fewest J/token, {energy}: `{name}` ({jpt}{busy})")
    if partial.any():
        off = ", ".join(f"`{n}`" for n in rows[partial]["config_name"])
        lines.append(f"- Not ranked on J/token ({PARTIAL}): {off}")
    if rows["tokens_per_s"].notna().any():
        fastest = rows.loc[rows["tokens_per_s"].idxmax()]
        tps = g(fastest["tokens_per_s"])
        busy = f", {CONTENDED}" if flagged(fastest["contended"]) else ""
        part = f", {PARTIAL}" if fastest["partial_model"] else ""
        lines.append(f"- Fastest: `{fastest['config_name']}` ({tps} tokens/s{busy}{part})")
    return lines + waiting_table(rows)


def waiting_table(rows: pd.DataFrame) -> list[str]:
    """How much of the ranks' time went to waiting for each other (multi-device rows only)."""
    multi = rows[(rows["devices"] > 1) & rows["wait_fraction"].notna()]
    if multi.empty:
        return []
    interval = interval_caption(multi["n_repeats"])
    lines = [
        "",
        "Waiting for other ranks (share of rank-time; load imbalance shows here; interval: "
        f"{interval}):",
        "",
        "| configuration | wait fraction (median [interval]) |",
        "|---|---|",
    ]
    for r in multi.itertuples():
        ci = f"[{r.wait_fraction_ci_low:.3f}, {r.wait_fraction_ci_high:.3f}]"
        lines.append(f"| {r.config_name} | {r.wait_fraction:.3f} {ci} |")
    return lines
