"""docs/settings.md is what the sections' fields say (written by greenbench.settings.reference)."""

from __future__ import annotations

from pathlib import Path

from greenbench.settings import SCHEMA
from greenbench.settings.reference import markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_the_settings_reference_is_current() -> None:
    assert DOC.read_text() == markdown(), (
        "docs/settings.md is stale: python -m greenbench.settings.reference > docs/settings.md"
    )


def test_every_setting_is_in_the_reference_with_its_doc() -> None:
    text = DOC.read_text()
    for key, setting in SCHEMA.settings.items():
        assert f"| `{key}` |" in text and setting.doc.split()[0] in text, key
