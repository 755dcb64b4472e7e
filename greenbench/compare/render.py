"""Print a Verdict: terminal table (rich), Markdown (GitHub step summary) or JSON.

Symbols: ``+`` worse (a regression), ``-`` better (an improvement), ``~`` no significant change,
``?`` inconclusive; ``!`` marks an unstable row (CV above the cap), and the trust model's
``⚠ contended`` beside the energy label a row with a run that shared the machine.

REFs, labels, configuration names and reasons come from users and databases: the terminal table
prints them as plain ``Text`` or ``escape``d (a label ``[/bold] x`` is shown as written, never read
as rich markup), and Markdown puts them in code spans that no backtick inside can close.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import TextIO

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from greenbench.compare.verdict import Row, Verdict
from greenbench.reporting.axes import POINT_NAMES, points_phrase
from greenbench.vocabulary.trust import CONTENDED

_STYLE = {"+": "bold red", "-": "green", "~": "dim", "?": "yellow"}
_HEADERS = (
    "",
    "workload",
    "configuration",
    "metric",
    "energy",
    "n base/cand",
    "baseline",
    "candidate",
    "change",
    "p (Holm)",
    "verdict",
)


def cells(row: Row, mode: str = "samples", history_by: str | None = None) -> list[str]:
    """One row's cells, in ``_HEADERS`` order (the Markdown and terminal tables share them);
    in history mode the baseline counts the points of the history's axis ("12 commits")."""
    arrow = "↓" if row.lower_is_better else "↑"
    flag = "!" if row.unstable else ""
    verdict = row.status + (f": {row.note}" if row.note else "")
    base_label = str(row.n_baseline)
    if mode == "history":
        base_label = points_phrase(row.n_baseline, history_by or "commit")
    return [
        row.symbol + flag,
        row.workload,
        f"{row.config_name} {row.layout}".strip(),
        f"{row.metric} {arrow}",
        row.energy_label + (f" · {CONTENDED}" if row.contended else ""),
        f"{base_label}/{row.n_candidate}",
        _num(row.baseline_median),
        _num(row.candidate_median),
        _change(row),
        _num(shown_p(row)),
        verdict,
    ]


def _change(row: Row) -> str:
    """The median's relative change; n/a where a side's median is unknown or not reached."""
    if not all(math.isfinite(x) for x in (row.ratio, row.baseline_median, row.candidate_median)):
        return "n/a"
    return f"{row.ratio - 1:+.1%}"


def shown_p(row: Row) -> float:
    """The Holm-adjusted p of the direction the median moved in."""
    if math.isnan(row.ratio):
        return math.nan
    moved_worse = row.ratio >= 1 if row.lower_is_better else row.ratio <= 1
    return row.p_worse_holm if moved_worse else row.p_better_holm


def rule_line(verdict: Verdict) -> str:
    """The rule as applied: δ, the test, α and how many p-values Holm corrected over (said
    only where there was one: with none, "no comparisons" or nothing)."""
    k = sum(not math.isnan(r.p_worse) for r in verdict.rows)
    deltas = sorted({r.delta for r in verdict.rows})
    delta = "/".join(f"{d:.0%}" for d in deltas) or "δ"
    test = (
        "one-sided t prediction interval on log history"
        if verdict.mode == "history"
        else "one-sided exact Mann–Whitney U"
    )
    holm = f" (Holm over {k})" if k else ""
    axis = (
        f"; one history result per {POINT_NAMES.get(verdict.history_by or '', 'run')}"
        if verdict.mode == "history"
        else ""
    )
    nothing = "; no comparisons" if not verdict.rows else ""
    return (
        f"rule: regression = median change beyond ±{delta} AND {test} p < α={verdict.alpha:g}"
        f"{holm}; unstable = CV > {verdict.cv_cap:.0%}{axis}{nothing}"
    )


def render_table(verdict: Verdict, out: TextIO) -> None:
    """The terminal table, mismatches, notes and the summary line."""
    console = Console(file=out, width=None if out.isatty() else 180, highlight=False)
    title = Text(f"greenbench compare: {verdict.baseline_ref or 'baseline'} → ")
    title.append(verdict.candidate_ref or "candidate")
    table = Table(*_HEADERS, title=title, box=box.SIMPLE_HEAD)
    for row in verdict.rows:
        c = cells(row, verdict.mode, verdict.history_by)
        table.add_row(*(Text(x) for x in c), style=_STYLE[row.symbol])
    console.print(table)
    for m in verdict.mismatches:
        text = escape(f"({m.side}) {m.workload} {m.config_name} [{m.energy}]: {m.reason}")
        console.print(f"[yellow]not compared[/] {text}")
    for note in verdict.notes:
        console.print(f"note: {escape(note)}")
    console.print(escape(rule_line(verdict)), style="dim")
    style = "bold red" if verdict.exit_code == 3 else "bold"
    console.print(Text(f"{verdict.summary} (exit {verdict.exit_code})", style=style))


def render_markdown(verdict: Verdict) -> str:
    """A GitHub-flavoured Markdown summary."""
    lines = [
        f"### greenbench compare: {verdict.summary}",
        "",
        f"baseline {_code(verdict.baseline_ref or '?')} → "
        f"candidate {_code(verdict.candidate_ref or '?')}"
        + (f" (history mode, {_history_axis(verdict)})" if verdict.mode == "history" else ""),
        "",
        "| " + " | ".join(h or "·" for h in _HEADERS) + " |",
        "|" + "---|" * len(_HEADERS),
    ]
    for row in verdict.rows:
        lines.append(
            "| " + " | ".join(_md(c) for c in cells(row, verdict.mode, verdict.history_by)) + " |"
        )
    if not verdict.rows:
        lines.append("| " + " | ".join(["", "*nothing compared*"] + [""] * 9) + " |")
    if verdict.mismatches:
        lines += ["", "**Not compared**", ""]
        lines += [
            f"- {m.side}: {m.workload} {_code(m.config_name)} ({m.energy}): {m.reason}"
            for m in verdict.mismatches
        ]
    if verdict.notes:
        lines += ["", *[f"- note: {n}" for n in verdict.notes]]
    lines += [
        "",
        f"`+` worse, `-` better, `~` not significant, `?` inconclusive, `!` unstable, "
        f"`{CONTENDED}` a run shared the machine. "
        f"{rule_line(verdict)}. Exit code {verdict.exit_code}.",
        "",
    ]
    return "\n".join(lines)


def render_json(verdict: Verdict) -> str:
    return json.dumps(verdict.to_dict(), indent=2, allow_nan=False, ensure_ascii=False)


def emit(verdict: Verdict, fmt: str, out: TextIO) -> None:
    """Print in ``fmt``; Markdown is also appended to ``$GITHUB_STEP_SUMMARY`` when it is set."""
    if fmt == "json":
        out.write(render_json(verdict) + "\n")
    elif fmt == "markdown":
        text = render_markdown(verdict)
        out.write(text)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with Path(summary).open("a", encoding="utf-8") as fh:
                fh.write(text + "\n")
    else:
        render_table(verdict, out)


def _history_axis(verdict: Verdict) -> str:
    """ "by commit", "by day" …: what one history result is."""
    return f"by {POINT_NAMES.get(verdict.history_by or '', 'run')}"


def _num(v: float) -> str:
    if v is None or math.isnan(v):
        return "n/a"
    if math.isinf(v):  # a median over repeats that did not reach their target
        return "not reached"
    return f"{v:.4g}"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    """``text`` as a Markdown code span, fenced by more backticks than it holds in a row."""
    text = str(text).replace("\n", " ")
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
