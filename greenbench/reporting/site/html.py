"""How a published site writes HTML: the page around a body, the report's Markdown as HTML, and
a chart's place on a page.

A page's styles are inline and its one script is the site's Vega bundle, named relatively
(``../`` once per folder the page is below the root), so every page opens from disk with no
server and asks no network for anything. The report's sections speak Markdown; they are turned
into HTML by markdown-it (CommonMark with tables, raw HTML in the text escaped, never passed
through), each heading given an ``id`` so that a page's contents can link to it. A chart is a
``div`` with its Vega-Lite spec beside it as JSON data; one script at the end of the page hands
each spec to ``vegaEmbed`` (SVG, no action menu: that menu's links lead to the network).
"""

from __future__ import annotations

import html
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from markdown_it import MarkdownIt

from greenbench.reporting.site.assets import BUNDLE

_MD = MarkdownIt("commonmark", {"html": False}).enable("table")

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1240px; padding: 0 1.2em 3em; color: #1d1d1f; }
h1 { margin: 0.8em 0 0.3em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
nav { font-size: 0.9em; padding: 0.5em 0; border-bottom: 1px solid #eee; }
nav a { margin-right: 1em; white-space: nowrap; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.8em 0; display: block;
        overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f5f5f7; } tr:nth-child(even) td { background: #fafafa; }
blockquote { margin: 0.8em 0; padding: 0.4em 1em; background: #fff8e6;
             border-left: 4px solid #f0b400; }
code { font-size: 0.9em; background: #f2f2f2; padding: 0 0.2em; border-radius: 3px; }
figure { margin: 1em 0; } figure img { max-width: 100%; }
figcaption, .caption { font-size: 0.85em; color: #555; }
.chart { margin: 1em 0; overflow-x: auto; }
.estimate { background: rgba(255, 170, 0, 0.18); }
"""

_EMBED = """
for (const data of document.querySelectorAll("script.vega-spec")) {
  const spec = JSON.parse(data.textContent);
  vegaEmbed("#" + data.dataset.chart, spec, {actions: false, renderer: "svg"})
    .catch((error) => console.error(error));
}
"""


@dataclass
class Page:
    """One HTML page being written: its title, how deep below the site's root it lies (for
    relative links to the root), its body and whether it holds a chart (then it loads the
    Vega bundle)."""

    title: str
    depth: int = 0
    parts: list[str] = field(default_factory=list)
    charts: int = 0

    def root(self) -> str:
        """The relative path from this page to the site's root ("" or "../")."""
        return "../" * self.depth

    def add(self, *fragments: str) -> None:
        """Append HTML ``fragments`` to the body."""
        self.parts.extend(fragments)

    def chart(self, spec: dict[str, Any], caption: str = "") -> str:
        """The HTML of a chart on this page (a Vega-Lite spec, `altair.Chart.to_dict`) with
        its caption; the page then loads the Vega bundle."""
        self.charts += 1
        chart_id = f"chart-{self.charts}"
        data = json.dumps(spec, separators=(",", ":"), allow_nan=False)
        data = data.replace("</", "<\\/")  # the JSON can never close its script element
        return (
            f'<div class="chart"><div id="{chart_id}" class="vega-chart"></div>'
            + (f'<p class="caption">{html.escape(caption)}</p>' if caption else "")
            + f'<script type="application/json" class="vega-spec" data-chart="{chart_id}">'
            + data
            + "</script></div>"
        )

    def render(self) -> str:
        """The whole page."""
        scripts = f'<script src="{self.root()}{BUNDLE}"></script>' if self.charts else ""
        embed = f"<script>{_EMBED}</script>" if self.charts else ""
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(self.title)}</title>\n<style>{STYLE}</style>\n{scripts}\n"
            "</head>\n<body>\n" + "\n".join(self.parts) + f"\n{embed}\n</body>\n</html>\n"
        )


@dataclass(frozen=True)
class Heading:
    """A heading of rendered Markdown: its level, text and ``id``."""

    level: int
    text: str
    anchor: str


def markdown(lines: list[str], taken: set[str]) -> tuple[str, list[Heading]]:
    """``lines`` of Markdown as HTML, and its headings, each with an ``id`` unique among
    ``taken`` (which it joins)."""
    tokens = _MD.parse("\n".join(lines))
    headings = []
    for opening, inline in itertools.pairwise(tokens):
        if opening.type != "heading_open":
            continue
        text = "".join(c.content for c in inline.children or [])
        anchor = unique_anchor(text, taken)
        opening.attrSet("id", anchor)
        headings.append(Heading(int(opening.tag[1:]), text, anchor))
    return _MD.renderer.render(tokens, _MD.options, {}), headings


def unique_anchor(text: str, taken: set[str]) -> str:
    """A fragment id from ``text`` ("Workload `x`" → "workload-x"), not one in ``taken``."""
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
    anchor, n = base, 1
    while anchor in taken:
        n += 1
        anchor = f"{base}-{n}"
    taken.add(anchor)
    return anchor


def figure(src: str, alt: str) -> str:
    """A static figure (one of the report's PNGs) with its alt text as caption."""
    a = html.escape(alt)
    return f'<figure><img src="{html.escape(src)}" alt="{a}"><figcaption>{a}</figcaption></figure>'


def link(href: str, text: str) -> str:
    """An ``<a>`` to ``href`` (relative) reading ``text``."""
    return f'<a href="{html.escape(href)}">{html.escape(text)}</a>'


def escape(text: object) -> str:
    """``text`` safe inside HTML."""
    return html.escape(str(text))
