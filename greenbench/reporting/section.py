"""What a section of ``greenbench report`` is: the `ReportSection` protocol and the
`ReportContext` every section reads.

The report (`greenbench.reporting.report`) writes its header, then every registered section
(`greenbench.reporting.sections.REPORT_SECTIONS`) in ``order`` whose ``applies`` holds, each
``render`` giving its Markdown lines (and writing its PNGs into ``context.out_dir``). Adding a
section is one module holding a class that keeps this protocol, and one line in the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pandas as pd

#: where a configuration's own page is, relative to the page that links it, from its
#: ``config_key`` and ``energy_source`` (a published site's history page); None: no page
ConfigLink = Callable[[str, str], str | None]


@dataclass(frozen=True)
class ReportContext:
    """What a report is written from, read once for every section.

    ``raw``: every repeat of the runs reported (the whole database, or what a REF names);
    ``measured``: its training rows (`leaderboard.training_rows`); ``table``: the leaderboard
    over them (`report.summarise`, empty when no measured training run is there); ``own``: the
    user's own measurements; ``whole_database``: no REF narrowed the report (sections that read
    the database for their own workload's runs show only then); ``out_dir``: where PNGs go;
    ``link``: where a configuration's own page is (`greenbench publish`'s history pages; a
    Markdown report has none), for the sections that name configurations to link them.
    """

    db_path: str | Path
    out_dir: Path
    raw: pd.DataFrame
    measured: pd.DataFrame
    table: pd.DataFrame
    own: pd.DataFrame
    whole_database: bool
    link: ConfigLink | None = None


class ReportSection(Protocol):
    """One section of the report.

    ``name`` and ``doc`` (one line) are what `greenbench list report-sections` shows; ``order``
    places the section among the others (lower first). ``applies`` says, cheaply, whether the
    report's kind admits the section (a leaderboard there, the whole database read); ``render``
    returns its Markdown lines, each section beginning with an empty line and its ``##`` heading,
    or none when the database holds nothing for it.
    """

    name: str
    order: int
    doc: str

    def applies(self, context: ReportContext) -> bool:
        """Whether this section belongs in a report of ``context``."""
        ...

    def render(self, context: ReportContext) -> list[str]:
        """The section's Markdown lines (PNGs written into ``context.out_dir``)."""
        ...
