"""``greenbench publish``: the results database as a static web site, opened from disk.

The site is the report (`greenbench.reporting.report`) made browsable, after asv's
``publish``: ``index.html`` holds the report's header (where the figures come from, whether
energy is measured or estimated) and every report section that applies, in the report's order
and with its tables and statements as the report writes them (the leaderboard with the same
rows and trust column, each configuration linked to its history); the figures whose data is
the leaderboard (the Pareto fronts, the Transformer-vs-Mamba curves, each workload's bars) are
interactive charts (`greenbench.reporting.site.figures`), any other is the section's PNG in
``figures/``. ``history/`` holds one page per leaderboard configuration: J/token and tokens/s
per commit with their intervals (`greenbench.reporting.site.history`). Charts are Vega-Lite
through Altair, run by one copy of vega-embed in ``assets/`` (`greenbench.reporting.site.assets`);
every link is relative, so the folder can be opened, copied or served as it is, with no network.

The site is written into a temporary folder beside ``--out`` and renamed into place when
complete (``greenbench.outputs``): a failure leaves nothing half-written. An empty database is
refused before anything is written; so is a non-empty ``--out`` without ``force``, and, even
with it, a folder that does not hold an earlier site (``greenbench-site.json``): replacing a
site replaces the whole folder, which must never take a user's other files with it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import altair as alt

import greenbench
from greenbench.errors import OutputError
from greenbench.outputs import atomic_folder, resolve_target
from greenbench.reporting.report import header_lines, report_context, report_rows
from greenbench.reporting.section import ReportContext
from greenbench.reporting.sections import REPORT_SECTIONS
from greenbench.reporting.site import history, html
from greenbench.reporting.site.assets import BUNDLE, vega_bundle
from greenbench.reporting.site.figures import interactive

#: the file that marks a folder as a site `publish` wrote (and may replace with ``force``)
MANIFEST = "greenbench-site.json"
FIGURES = "figures"
#: what a site's root holds, and nothing else
SITE_ENTRIES = ("index.html", MANIFEST, "assets", FIGURES, history.FOLDER)
HISTORY_ANCHOR = "history-per-configuration"
_IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)\)$")


@dataclass(frozen=True)
class Published:
    """What `publish` wrote: the index page, how many pages in all, and the site's bytes."""

    index: Path
    pages: int
    size_bytes: int


def publish(
    db_path: str | Path,
    out_dir: str | Path,
    *,
    title: str = "greenbench results",
    force: bool = False,
) -> Published:
    """Write the site of every finished run in ``db_path`` into ``out_dir``.

    An existing non-empty ``out_dir`` is an OutputError unless ``force`` and it holds an
    earlier site (then it is replaced whole); an empty database is a StoreError; in both cases
    nothing is written.
    """
    target = resolve_target(out_dir, kind="folder", force=force)
    if force and target.is_dir() and any(target.iterdir()) and not earlier_site(target):
        raise OutputError(
            f"{target} is not empty and holds no earlier greenbench site ({MANIFEST}): publish "
            "into a new or empty folder (--force replaces only an earlier site, whole)"
        )
    raw = report_rows(db_path)
    bundle = vega_bundle()
    with atomic_folder(target, swap=True, last="index.html") as tmp:
        for folder in ("assets", FIGURES, history.FOLDER):
            (tmp / folder).mkdir()
        (tmp / BUNDLE).write_text(bundle, encoding="utf-8")
        context = report_context(db_path, tmp / FIGURES, raw, whole_database=True)
        entries = history.entries(context.table)
        files = {(e.config_key, e.energy_source): e.file for e in entries}
        context = replace(context, link=lambda key, source: files.get((key, source)))
        pages = ["index.html"]
        commits = {}
        for entry in entries:
            hist = history.history_frame(context.measured, entry)
            commits[entry.file] = int(hist["point"].nunique()) if len(hist) else 0
            (tmp / entry.file).write_text(history.page(entry, hist, title).render(), "utf-8")
            pages.append(entry.file)
        index = _index(context, title, entries, commits)
        _keep_shown_figures(tmp / FIGURES, index)
        (tmp / "index.html").write_text(index.render(), encoding="utf-8")
        _write_manifest(tmp, db_path, title, pages)
        size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
    return Published(target / "index.html", len(pages), size)


def earlier_site(folder: Path) -> bool:
    """Whether ``folder`` holds a site `publish` wrote and nothing else."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(manifest, dict)
        and manifest.get("generator") == "greenbench publish"
        and all(p.name in SITE_ENTRIES for p in folder.iterdir())
    )


def _index(
    context: ReportContext,
    title: str,
    entries: list[history.Entry],
    commits: dict[str, int],
) -> html.Page:
    """The index page: the report's header, its sections, and the list of history pages."""
    page = html.Page(title)
    taken: set[str] = {HISTORY_ANCHOR}
    header, _ = html.markdown(header_lines(context), taken)
    body: list[str] = []
    contents: list[html.Heading] = []
    for section in REPORT_SECTIONS:
        if not section.applies(context):
            continue
        body += _section_html(section.render(context), context, page, taken, contents)
    if entries:
        contents.append(html.Heading(2, "History per configuration", HISTORY_ANCHOR))
        body.append(_history_list(entries, commits))
    nav = " ".join(html.link(f"#{h.anchor}", h.text) for h in contents if h.level == 2)
    page.parts[:0] = [f"<h1>{html.escape(title)}</h1>", header, f"<nav>{nav}</nav>"]
    page.add(*body)
    page.add(
        f'<p class="caption">Generated by greenbench {html.escape(greenbench.__version__)} '
        "(<code>greenbench publish</code>). Charts: Vega-Lite "
        f"{html.escape(alt.SCHEMA_VERSION)} through vega-embed, bundled in "
        f"<code>{BUNDLE}</code>: the site opens from disk, with no server and no network.</p>"
    )
    return page


def _section_html(
    lines: list[str],
    context: ReportContext,
    page: html.Page,
    taken: set[str],
    contents: list[html.Heading],
) -> list[str]:
    """A section's Markdown as HTML parts, each figure line replaced by its interactive charts
    (drawn into ``page``) or its PNG; its headings join ``contents``."""
    parts: list[str] = []
    chunk: list[str] = []

    def flush() -> None:
        if chunk:
            text, headings = html.markdown(chunk, taken)
            parts.append(text)
            contents.extend(headings)
            chunk.clear()

    for line in lines:
        found = _IMAGE.match(line.strip())
        if not found:
            chunk.append(line)
            continue
        flush()
        drawn = interactive(found["src"], context)
        if drawn is None:
            parts.append(html.figure(f"{FIGURES}/{found['src']}", found["alt"]))
            continue
        parts.extend(page.chart(chart.to_dict(), caption) for chart, caption in drawn)
    flush()
    return parts


def _history_list(entries: list[history.Entry], commits: dict[str, int]) -> str:
    """The index's list of history pages, one row per leaderboard configuration."""
    lines = [
        "",
        "J/token and tokens/s of each configuration on the leaderboard, per commit in the order "
        "each first ran (per day for runs stored without a git sha), with their intervals:",
        "",
        "| configuration | workload | energy | commits (or days) |",
        "|---|---|---|---|",
    ]
    for e in entries:
        name = e.config_name.replace("[", "\\[").replace("]", "\\]").replace("|", "\\|")
        lines.append(f"| [{name}]({e.file}) | {e.workload} | {e.energy} | {commits[e.file]} |")
    text, _ = html.markdown(lines, set())
    return f'<h2 id="{HISTORY_ANCHOR}">History per configuration</h2>\n{text}'


def _keep_shown_figures(folder: Path, index: html.Page) -> None:
    """Remove the report's PNGs the site draws as charts instead (and the folder if empty)."""
    shown = "\n".join(index.parts)
    for png in folder.glob("*.png"):
        if f'src="{FIGURES}/{png.name}"' not in shown:
            png.unlink()
    if not any(folder.iterdir()):
        folder.rmdir()


def _write_manifest(root: Path, db_path: str | Path, title: str, pages: list[str]) -> None:
    """``greenbench-site.json``: what wrote the site, from what, when, and its pages."""
    manifest = {
        "generator": "greenbench publish",
        "greenbench": greenbench.__version__,
        "title": title,
        "database": str(Path(db_path).resolve()),
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "pages": pages,
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
