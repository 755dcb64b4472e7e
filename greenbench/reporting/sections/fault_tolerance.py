"""The report's section on fault-tolerant training: per checkpoint interval, the energy a failure
cost (the work redone and the restart), goodput and what the checkpoints cost
(`greenbench.reporting.fault_tolerance.read_intervals`), beside the interval Young's and Daly's
models call optimum from those measured costs (`greenbench.reporting.young_daly`); a PNG per
group of intervals; and what the runs say, computed, "cannot tell" included."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from greenbench.reporting.cells import ESTIMATE_FOLLOWS_TIME, g, row
from greenbench.reporting.fault_tolerance import (
    event_notes,
    group_optimum,
    read_events,
    read_intervals,
)
from greenbench.reporting.section import ReportContext
from greenbench.reporting.sections.comm_efficient import bytes_text
from greenbench.reporting.target_findings import Verdict, compare
from greenbench.reporting.to_target import Spread, cell, number, seeds_caption, spread
from greenbench.reporting.young_daly import Optimum
from greenbench.vocabulary.trust import interval_for

PNG = "fault-tolerance.png"
TITLE = "Fault tolerance"
#: the distinct notes of one event kind the section lists
NOTES = 3
EMPTY = (
    "No fault-tolerant run is stored: `greenbench run --workload fault-tolerance` checkpoints a "
    "run at three intervals and kills a rank in each."
)


def png_name(index: int) -> str:
    """The chart of the ``index``-th group: `PNG`, then ``fault-tolerance-2.png`` …"""
    return PNG if index == 0 else PNG.replace(".png", f"-{index + 1}.png")


def _finite(v: object) -> bool:
    try:
        return math.isfinite(float(v))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _share(v: object) -> str:
    return f"{float(v):.1%}" if _finite(v) else "n/a"  # type: ignore[arg-type]


def _every(every: int) -> str:
    return "none" if every < 0 else str(every)


def interval_cells(r: pd.Series, optimum: Optimum | None) -> list[str]:
    """One interval's row of the table."""
    model = optimum.waste(r["every"]) if optimum is not None and r["every"] > 0 else math.nan
    return [
        _every(int(r["every"])), str(r["runs"]), str(r["failures"]),
        cell(spread(r, "lost_per_failure_j"), unit="J"),
        f"{number(r['redone_per_failure_j'], 'J')}, {number(r['redone_per_failure_s'], 's')}, "
        f"{g(r['redone_steps_per_failure'])} steps",
        f"{number(r['restart_per_failure_j'], 'J')}, {number(r['restart_per_failure_s'], 's')}",
        cell(spread(r, "goodput")),
        g(r["ckpt_count"]), number(r["ckpt_s"], "s"), number(r["ckpt_j"], "J"),
        bytes_text(r["ckpt_bytes"]), number(r["delta_s"], "s"),
        cell(spread(r, "overhead_j"), unit="J"), _share(r["waste"]), _share(model),
    ]  # fmt: skip


HEADS = [
    "ckpt.every (steps)", "runs", "failures", "energy lost per failure", "of it redone",
    "of it restart", "goodput", "checkpoints", "waited for them", "their energy",
    "bytes written", "δ per checkpoint", "checkpoints + failures (J)", "waste, measured",
    "waste, model",
]  # fmt: skip


def optimum_text(o: Optimum | None, rows: pd.DataFrame) -> str:
    """The Young/Daly optimum of a group in words, with what it was computed from."""
    if o is None:
        return (
            "No Young/Daly interval: these runs stored no checkpoint or no failure, so the "
            "checkpoint cost or the failure rate is unknown."
        )
    run = ", ".join(_every(int(e)) for e in rows["every"])
    return (
        f"Young/Daly from the measured figures: δ = {g(o.delta_s)} s per checkpoint (the "
        f"seconds training waited, ÷ the checkpoints), M = {g(o.mtbf_s)} s per failure (the "
        "runs' seconds ÷ their failures: the rate the injected failure sets, not a machine's), "
        f"R = {g(o.restart_s)} s per restart, a step {g(o.step_s * 1000)} ms: Young's "
        f"τ* = √(2δM) = {g(o.young_s)} s ≈ **{g(o.young_steps)} steps**; Daly's "
        f"τ* = {g(o.daly_s)} s ≈ **{g(o.daly_steps)} steps**. Intervals run: {run} steps."
    )


def group_heading(rows: pd.DataFrame, several_devices: bool) -> str:
    """What a group's runs are: configuration, ranks, checkpoint mode, the failure injected."""
    r = rows.iloc[-1]
    kill = str(r["kill"]).strip()
    failure = ""
    if kill:
        rank, _, step = kill.partition("@")
        failure = f", rank {rank} killed after {step} measured steps"
    device = f" on {r['device_type']}" if several_devices else ""
    return (
        f"**{r['config_name']}** ({r['strategy']}×{r['nproc']}, ckpt.mode={r['mode']}"
        f"{failure}){device}, energy: {r['energy']}"
    )


# ------------------------------------------------------------------------------ findings


#: `compare`'s reason where a side has one value, said of runs (its judging sentence follows)
ONE_RUN = "one seed has no interval: run more seeds"


def _why(v: Verdict) -> str:
    """Why a verdict cannot tell, said of runs; "" where one run per interval is the reason
    (the findings say that once)."""
    return "" if v.why == ONE_RUN else v.why.replace("seed", "run")


def _said(v: Verdict, less: str, more: str, which: str) -> str:
    if v.word == "less":
        return less
    if v.word == "more":
        return more
    why = _why(v)
    return f"cannot tell {which}" + (f" ({why})" if why else "")


def _judged(rows: pd.DataFrame, figure: str) -> str:
    n = int(pd.to_numeric(rows[f"{figure}_n"], errors="coerce").min())
    kind = interval_for(n).kind
    if kind == "ci":
        return "judged on 95 % CIs of the medians over runs"
    if kind == "range":
        return f"judged on the min–max ranges of as few as {n} runs: not CIs, a weak test"
    return "one run per interval: no interval to judge on (`--seeds 3` gives three)"


def lost_findings(rows: pd.DataFrame) -> list[str]:
    """Each interval against the next larger one: energy lost per failure and the whole
    overhead (checkpoints and failures), `compare` on the intervals over runs."""
    out = []
    label = rows["energy"].iloc[-1]
    estimate = f" (energy: estimate; {ESTIMATE_FOLLOWS_TIME})" if label == "estimate" else ""
    ordered = rows[rows["every"] > 0].sort_values("every")
    for (_, a), (_, b) in zip(ordered.iloc[:-1].iterrows(), ordered.iloc[1:].iterrows(),
                              strict=True):  # fmt: skip
        lost = compare(spread(a, "lost_per_failure_j"), spread(b, "lost_per_failure_j"))
        whole = compare(spread(a, "overhead_j"), spread(b, "overhead_j"))
        out.append(
            f"- every {a['every']} steps against every {b['every']}: "
            f"**{_said(lost, 'less energy lost', 'more energy lost', 'which loses less')}** "
            f"per failure ({number(a['lost_per_failure_j'], 'J')} against "
            f"{number(b['lost_per_failure_j'], 'J')}); checkpoints and failures together "
            f"**{_said(whole, 'less', 'more', 'which costs less')}** "
            f"({number(a['overhead_j'], 'J')} against {number(b['overhead_j'], 'J')}){estimate}."
        )
    if out:
        judged = _judged(ordered, "overhead_j")
        out[-1] += f" {judged[0].upper()}{judged[1:]}."
    return out


def least_waste(rows: pd.DataFrame) -> tuple[int | None, str]:
    """The interval whose checkpoints and failures cost least in joules, and whether that is
    told apart from every other (`compare`): (its ``every``, the words)."""
    known = rows[(rows["every"] > 0) & rows["overhead_j"].map(_finite)]
    if known.empty:
        return None, "no interval's overhead is known"
    best = known.loc[pd.to_numeric(known["overhead_j"]).idxmin()]
    others = known[known["every"] != best["every"]]
    verdicts = [compare(spread(best, "overhead_j"), spread(o, "overhead_j")) for _, o in
                others.iterrows()]  # fmt: skip
    if all(v.word == "less" for v in verdicts):
        return int(best["every"]), "told apart from every other interval"
    why = _why(next(v for v in verdicts if v.word != "less"))
    return int(best["every"]), "lowest median, but cannot tell it from the others" + (
        f" ({why})" if why else ""
    )


def optimum_findings(rows: pd.DataFrame, o: Optimum | None) -> list[str]:
    """Where the Young/Daly interval lies among those run, against the measured least waste;
    and the model's waste against the measured at each interval."""
    if o is None:
        return []
    run = sorted(int(e) for e in rows["every"] if e > 0)
    if not run:
        return []
    nearest = min(run, key=lambda e: abs(math.log(e) - math.log(max(o.daly_steps, 1e-9))))
    where = (
        f"below every interval run (the shortest, {run[0]})"
        if o.daly_steps < run[0]
        else f"above every interval run (the longest, {run[-1]})"
        if o.daly_steps > run[-1]
        else f"nearest to every {nearest}"
    )
    best, how = least_waste(rows)
    measured = (
        f"the measured checkpoints and failures cost least at every {best} ({how})"
        if best is not None
        else f"the measured least waste is unknown ({how})"
    )
    agree = ""
    if best is not None and "told apart" in how:
        agree = " — the model agrees" if best == nearest else " — the model does not agree"
    lines = [
        f"- Daly's optimum, {g(o.daly_steps)} steps ({g(o.daly_s)} s; Young's "
        f"{g(o.young_steps)}), lies {where}; {measured}{agree}."
    ]
    pairs = [
        f"every {int(r['every'])}: {_share(o.waste(int(r['every'])))} modelled, "
        f"{_share(r['waste'])} measured"
        for _, r in rows.iterrows()
        if r["every"] > 0
    ]
    lines.append(
        "- The model's waste (δ/τ + (τ/2 + R)/M) against the measured share of the window spent "
        "on checkpoints, redone work and restarts: " + "; ".join(pairs) + ". The model expects "
        "a failure at a random time (half an interval redone); the injected one falls at a "
        "fixed step, so the measured redone work is what that step leaves since the last "
        "checkpoint."
    )
    return lines


# ------------------------------------------------------------------------------ figure


def plot(rows: pd.DataFrame, o: Optimum | None, path: Path) -> bool:
    """Energy lost per failure (its parts beside) and goodput against ``ckpt.every`` (log
    scale), and the measured waste with the model's curve; the Young and Daly intervals as
    vertical lines. False (nothing written) where no interval has a figure to draw."""
    rows = rows[rows["every"] > 0].sort_values("every")
    if rows.empty or not (rows["lost_per_failure_j"].map(_finite).any()
                          or rows["goodput"].map(_finite).any()):  # fmt: skip
        return False
    xs = [float(e) for e in rows["every"]]
    fig = Figure(figsize=(12.0, 3.8))
    axes = [fig.add_subplot(1, 3, i) for i in (1, 2, 3)]
    label = rows["energy"].iloc[-1]

    def bars(ax, figure: str, colour: str, name: str) -> None:
        ys, low, high = [], [], []
        for _, r in rows.iterrows():
            s: Spread = spread(r, figure)
            ys.append(s.median)
            low.append(s.median - s.low if s.has_interval else 0.0)
            high.append(s.high - s.median if s.has_interval else 0.0)
        ax.errorbar(xs, ys, yerr=[low, high], fmt="o-", color=colour, capsize=4, label=name)

    bars(axes[0], "lost_per_failure_j", "C3", "energy lost per failure")
    axes[0].plot(xs, rows["redone_per_failure_j"], "s--", color="C1", label="of it: redone")
    axes[0].plot(xs, rows["restart_per_failure_j"], "^--", color="C0", label="of it: restart")
    axes[0].plot(xs, rows["ckpt_j"], "d:", color="C2", label="checkpoints' energy (per run)")
    axes[0].set_ylabel(f"J — {label}")
    axes[0].set_ylim(bottom=0)
    axes[0].set_title("Energy lost per failure", fontsize=10)
    bars(axes[1], "goodput", "C4", "goodput")
    axes[1].set_ylabel("goodput (tokens ÷ tokens trained)")
    axes[1].set_ylim(0, 1.05)
    axes[1].set_title("Goodput", fontsize=10)
    bars(axes[2], "waste", "C5", "measured")
    top = max([float(v) for v in rows["waste"] if _finite(v)] + [0.1])
    if o is not None:
        grid = np.geomspace(min(xs) / 2, max(xs) * 2, 120)
        curve = [o.waste(float(x)) for x in grid]
        axes[2].plot(grid, curve, "-", color="0.4", label="model: δ/τ + (τ/2 + R)/M")
        top = max(top, min(max(curve), 3 * top))
    axes[2].set_ylim(0, top * 1.15)
    axes[2].set_ylabel("share of the window wasted")
    axes[2].set_title("Waste: measured and modelled", fontsize=10)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(int(x)) for x in xs])
        ax.set_xlabel("ckpt.every (measured steps)")
        if o is not None:
            for steps, style, name in ((o.young_steps, ":", "Young"), (o.daly_steps, "--",
                                                                       "Daly")):  # fmt: skip
                if _finite(steps) and steps > 0:
                    ax.axvline(steps, color="k", ls=style, lw=1,
                               label=f"{name} τ* = {g(steps)} steps")  # fmt: skip
        ax.legend(fontsize=6, loc="best")
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    return True


# ------------------------------------------------------------------------------ section


INTRO = (
    "Checkpointed runs with an injected failure: a rank SIGKILLed at a measured step, torchrun "
    "restarting every rank from the last checkpoint. Per failure, the energy it lost: the "
    "measured steps trained again after the restart (redone) and the restart itself (from the "
    "failure to training again: detection, process start, loading the checkpoint). Goodput: "
    "tokens ÷ every token trained, redone ones included. The checkpoints: how many, the seconds "
    "training waited for them and their joules. Seconds are wall clock, joules summed over the "
    "ranks' meters; medians over runs (one run per interval unless seeded), with their "
    "interval. Waste: the share of the window's seconds spent on checkpoints, redone work and "
    "restarts, measured, and as Young and Daly's model computes it from the measured δ, M and "
    "R at that interval."
)


def section_lines(
    table: pd.DataFrame, out_dir: Path, notes: dict[str, list[str]] | None = None
) -> list[str]:
    """The section over the interval table (`read_intervals`) and the events' notes
    (`event_notes`: at most `NOTES` of each kind); none where the table is empty (`EMPTY` says
    why, for a caller that prints it)."""
    if table.empty:
        return []
    lines = ["", f"## {TITLE}", "", INTRO]
    several = table["device_type"].nunique() > 1
    found: list[str] = []
    for index, (_, rows) in enumerate(table.groupby("group", sort=False)):
        o = group_optimum(rows)
        lines += ["", group_heading(rows, several), ""]
        lines += [row(HEADS), row(["---"] * len(HEADS))]
        lines += [row(interval_cells(r, o)) for _, r in rows.iterrows()]
        lines += ["", seeds_caption(rows["lost_per_failure_j_n"]).replace("seed", "run")]
        lines += ["", optimum_text(o, rows)]
        if plot(rows, o, out_dir / png_name(index)):
            lines += [
                "",
                f"![Energy lost per failure, goodput and waste against ckpt.every]"
                f"({png_name(index)})",
                "",
                "Bars: the interval over runs (none from one run). Vertical lines: Young's and "
                "Daly's optimum interval in measured steps, from the measured δ, M and R.",
            ]
        first = rows.iloc[-1]
        heading = f"**{first['config_name']}**" + (f" on {first['device_type']}" if several else "")
        said = lost_findings(rows) + optimum_findings(rows, o)
        if said:
            found += ["", f"{heading}:", "", *said]
    if (table["energy"] == "estimate").any():
        lines += ["", f"Joules labelled estimate are an {ESTIMATE_FOLLOWS_TIME}."]
    if notes:
        lines += ["", "What the runs' events say they estimate or leave out:", ""]
        for kind, texts in notes.items():
            more = f" (and {len(texts) - NOTES} more)" if len(texts) > NOTES else ""
            lines.append(f"- {kind}: " + "; ".join(texts[:NOTES]) + more)
    if found:
        lines += ["", "### What the runs say", *found]
    return lines


class FaultToleranceSection:
    """`ReportSection`: checkpoint intervals, failures, and the Young/Daly optimum."""

    name = "fault-tolerance"
    order = 67
    doc = "checkpoint intervals against an injected failure: energy lost, goodput, Young/Daly"

    def applies(self, context: ReportContext) -> bool:
        """Every report: the section says so where no fault-tolerant run is there."""
        return True

    def render(self, context: ReportContext) -> list[str]:
        """The tables, the PNGs and the findings over the runs the report covers."""
        ids = set(context.raw["run_id"]) if "run_id" in context.raw else set()
        table = read_intervals(context.db_path, ids)
        if table.empty:
            return []
        runs = sorted({r for ids_ in table.get("run_ids", []) for r in ids_})
        notes = event_notes(read_events(context.db_path, runs)) if runs else {}
        return section_lines(table, context.out_dir, notes)


__all__ = ["FaultToleranceSection", "section_lines"]
