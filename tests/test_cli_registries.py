"""`greenbench list strategies|model-families|energy-sources|report-sections`: every entry of
each registry, by name, with its one-line doc."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from greenbench import cli, cli_views
from greenbench.energy.sources import ENERGY_SOURCES
from greenbench.models import FAMILIES
from greenbench.reporting.sections import REPORT_SECTIONS
from greenbench.strategies import STRATEGIES


def _list(what: str) -> str:
    result = CliRunner().invoke(cli.main, ["list", what], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.output


def test_every_registry_listing_the_cli_offers_has_a_view():
    assert set(cli.REGISTRY_LISTS) == set(cli_views.REGISTRY_VIEWS)


@pytest.mark.parametrize(
    ("what", "names"),
    [
        ("strategies", list(STRATEGIES)),
        ("model-families", list(FAMILIES)),
        ("energy-sources", list(ENERGY_SOURCES)),
        ("report-sections", [s.name for s in REPORT_SECTIONS]),
    ],
)
def test_each_listing_names_every_entry_of_its_registry(what: str, names: list[str]):
    out = _list(what)
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows if r.split("│")[1].strip()] == names


def test_energy_sources_say_what_kind_of_figure_each_gives():
    out = _list("energy-sources")
    for name, source in ENERGY_SOURCES.items():
        (row,) = [line for line in out.splitlines() if line.startswith(f"│ {name} ")]
        assert source.figure in row and source.doc[:40] in row


def test_strategies_carry_their_card_s_doc():
    out = _list("strategies")
    for name, card in STRATEGIES.items():
        (row,) = [line for line in out.splitlines() if line.startswith(f"│ {name} ")]
        assert card.doc[:40] in row


def test_report_sections_carry_their_doc():
    out = _list("report-sections")
    for section in REPORT_SECTIONS:
        assert section.doc in out
