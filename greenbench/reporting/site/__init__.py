"""``greenbench publish``: the results database as a static site that opens from disk.

Modules: ``build`` (the site: its pages, written whole or not at all), ``html`` (pages and the
report's Markdown as HTML), ``figures`` (which report figures become interactive charts),
``charts`` (those charts, Altair), ``history`` (a page per configuration over commits) and
``assets`` (the one bundled copy of Vega's JavaScript).
"""

from __future__ import annotations

from greenbench.reporting.site.build import Published, publish

__all__ = ["Published", "publish"]
