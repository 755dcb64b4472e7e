"""The report's power-limit section: per sweep (one configuration over its GPU power limits,
`greenbench.reporting.limit_sweep`), a table of time and energy per limit, time against energy
coloured by limit with the Pareto front, the knee (the lowest J/token within 10 % of full speed)
and, beside it, the limit Zeus's GlobalPowerLimitOptimizer would choose from the same sweep. A
sweep whose time falls with the limit beyond its noise is said to be inconsistent, with the limits
that disagree, and names no front, knee or choice.

Sweeps of emulated GPUs (``emulate.gpu``: the power model answering NVML, energy "emulated (GPU
power model)") are shown, since trying the workload without a GPU is what they are for, but each
is headed as a model, never a measurement, and they are never pooled with measured sweeps.
Used by ``greenbench report``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from greenbench.reporting.limit_sweep import (
    COLUMNS,
    INCONSISTENT,
    MAX_SLOWDOWN,
    ZEUS_ETA,
    Sweep,
    sweeps,
)
from greenbench.reporting.repeats import read_repeats
from greenbench.reporting.section import ReportContext

PNG = "power-limits.png"
#: characters per line of a plot's title (its plot is 5.6 inches wide with its colour bar)
TITLE_CHARS = 52


def read_sweeps(db_path: str | Path) -> list[Sweep]:
    """The sweeps stored in ``db_path`` (ok runs with a power limit)."""
    return sweeps(read_repeats(db_path, COLUMNS))


def _pct(x: float) -> str:
    return f"{x + 0.0:+.1%}"  # + 0.0: no "-0.0 %"


def markdown(sweep: Sweep) -> list[str]:
    """One sweep's table and findings."""
    lines = [
        "",
        f"### {sweep.name} on {sweep.device_type} ×{sweep.devices}, energy {sweep.energy}",
        "",
    ]
    if not sweep.measured:
        lines += [
            "> These figures come from a model, not a measurement: an emulated GPU's power model "
            "answering NVML (`greenbench.hardware.gpu_model`), on CPU ranks. They show the "
            "workload's path and shape, never a result.",
            "",
        ]
    lines += [
        "| limit (W) | of default | tokens/s | J/token | time vs highest | J/token vs highest "
        "| GPU power mean / peak (W) | on front |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sweep.table.itertuples():
        share = f"{r.limit_w / r.default_w:.0%}" if r.default_w == r.default_w else "—"
        power = f"{r.gpu_power_avg_w:.0f} / {r.gpu_power_peak_w:.0f}"
        lines.append(
            f"| {r.limit_w:g} | {share} | {r.tokens_per_s:,.0f} | {r.joules_per_token:.4g} "
            f"| {_pct(r.slowdown - 1)} | {_pct(-r.saving)} | {power.replace('nan', '—')} "
            f"| {'yes' if r.on_front else ''} |"
        )
    lines.append("")
    if not sweep.consistent:
        lines.append(f"- **{INCONSISTENT.replace(':', ':**', 1)}:")
        lines += [f"  - {why}" for why in sweep.inconsistencies]
    if sweep.knee_w is not None:
        knee = sweep.table[sweep.table["limit_w"] == sweep.knee_w].iloc[0]
        lines.append(
            f"- **Knee: {sweep.knee_w:g} W**, the lowest J/token within "
            f"{MAX_SLOWDOWN - 1:.0%} of the highest limit's time: {_pct(-knee['saving'])} J/token "
            f"for {_pct(knee['slowdown'] - 1)} time."
        )
    lines += [f"- {note}" for note in sweep.notes]
    if sweep.zeus_cost_w is not None:
        lines.append(
            f"- Zeus's GlobalPowerLimitOptimizer would choose **{sweep.zeus_cost_w:g} W** with "
            f"its default selector, ZeusCost(η = {ZEUS_ETA:g}) — computed here with Zeus's "
            "published cost metric from this sweep, not by running its training callbacks; with "
            f"MaxSlowdownConstraint({MAX_SLOWDOWN:g}), {sweep.zeus_slowdown_w:g} W."
        )
    return lines


def plot(all_sweeps: list[Sweep], path: Path) -> Figure:
    """Time against energy per sweep, coloured by limit, with the front and the knee; saved to
    ``path`` and returned. Each title is the sweep's whole name, wrapped to its plot's width
    (never cut), and the layout keeps titles and labels inside the figure."""
    n = len(all_sweeps)
    fig = Figure(figsize=(5.6 * min(n, 3), 4.6 * ((n + 2) // 3)), layout="constrained")
    for i, sweep in enumerate(all_sweeps):
        ax = fig.add_subplot((n + 2) // 3, min(n, 3), i + 1)
        t = sweep.table
        points = ax.scatter(
            t["seconds_per_mtok"], t["joules_per_token"], c=t["limit_w"], cmap="viridis", s=60,
            zorder=3,
        )  # fmt: skip
        front = t[t["on_front"]].sort_values("seconds_per_mtok")
        if not front.empty:  # an inconsistent sweep has none
            ax.step(front["seconds_per_mtok"], front["joules_per_token"], where="post",
                    color="k", ls="--", lw=1, label="Pareto front")  # fmt: skip
        for r in t.itertuples():
            ax.annotate(f"{r.limit_w:g} W", (r.seconds_per_mtok, r.joules_per_token),
                        textcoords="offset points", xytext=(5, 4), fontsize=7)  # fmt: skip
        if sweep.knee_w is not None:
            k = t[t["limit_w"] == sweep.knee_w]
            ax.scatter(
                k["seconds_per_mtok"], k["joules_per_token"], s=220, facecolors="none",
                edgecolors="r", lw=1.5, label=f"knee {sweep.knee_w:g} W", zorder=4,
            )  # fmt: skip
        fig.colorbar(points, ax=ax, label="power limit (W)")
        ax.set_xlabel("time per million tokens (s, lower is better)")
        ax.set_ylabel(f"J/token, {sweep.energy}")
        title = "\n".join(textwrap.wrap(f"{sweep.name} on {sweep.device_type}", TITLE_CHARS))
        flag = "" if sweep.consistent else "\ninconsistent: time falls with the limit, no knee"
        ax.set_title(f"{title}{flag}", fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    return fig


def section(db_path: str | Path, out_dir: Path) -> list[str]:
    """The report's power-limit section (empty when no sweep is stored); writes its PNG."""
    found = read_sweeps(db_path)
    if not found:
        return []
    plot(found, out_dir / PNG)
    lines = [
        "",
        "## GPU power limits: time against energy",
        "",
        "Each configuration trained at each power limit; medians of the newest run's repeats. "
        "The knee is the limit with the lowest J/token whose time is within "
        f"{MAX_SLOWDOWN - 1:.0%} of the highest limit's. The goal for users with their own GPUs "
        "(Zeus and Perseus report ≥ 20 % less energy for ≤ 10 % less speed on large-model "
        "training) is what this workload measures, not a figure greenbench claims.",
        "",
        f"![Time against J/token per power limit, with the Pareto front and the knee]({PNG})",
    ]
    for sweep in found:
        lines += markdown(sweep)
    return lines


class PowerLimitsSection:
    """`ReportSection`: `section` over the whole database (a REF narrows the report to runs
    that are not this section's)."""

    name = "power-limits"
    order = 70
    doc = "GPU power-limit sweeps: time against energy per limit, the knee, Zeus's choice"

    def applies(self, context: ReportContext) -> bool:
        """When the report reads the whole database."""
        return context.whole_database

    def render(self, context: ReportContext) -> list[str]:
        """The sweeps' plot and tables (none when the database holds no such run)."""
        return section(context.db_path, context.out_dir)
