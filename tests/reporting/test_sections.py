"""The report's section registry: every section keeps the protocol, once, in a fixed order."""

from __future__ import annotations

import inspect

from greenbench.reporting.sections import REPORT_SECTIONS

EXPECTED = [
    "leaderboard", "pareto", "transformer-vs-mamba", "fsdp-vs-odc", "hybrid-layouts", "skippipe",
    "to-target", "comm-efficient", "fault-tolerance", "power-limits", "own-measurements",
    "workloads",
]  # fmt: skip


def test_sections_are_written_in_their_order_each_once():
    assert [s.name for s in REPORT_SECTIONS] == EXPECTED
    orders = [s.order for s in REPORT_SECTIONS]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)


def test_every_section_keeps_the_protocol_with_a_one_line_doc():
    for section in REPORT_SECTIONS:
        assert section.doc and "\n" not in section.doc, section.name
        for method in ("applies", "render"):
            params = list(inspect.signature(getattr(section, method)).parameters)
            assert params == ["context"], (section.name, method)
