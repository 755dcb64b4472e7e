"""The README a new user starts from: its synopsis names every packaged suite and every command,
and every link or image in it and in docs/ points at a file of this repository.

Why: the first minutes are the README's walkthrough; a suite or a command missing from its
synopsis is one a user never finds, and a link outside the repository is broken in every
clone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from greenbench.cli import main
from greenbench.suite import packaged_suites

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def synopsis() -> str:
    """The fenced block under ``## Commands``."""
    section = README.split("## Commands", 1)[1]
    return section.split("```", 2)[1]


def test_the_synopsis_names_every_packaged_suite() -> None:
    text = synopsis()
    missing = [name for name in packaged_suites() if not re.search(rf"\b{name}\b", text)]
    assert not missing, missing


def test_the_synopsis_names_every_command() -> None:
    text = synopsis()
    missing = [name for name in main.commands if f"greenbench {name}" not in text]
    assert not missing, missing


def test_the_walkthrough_starts_with_smoke_then_the_views() -> None:
    first = README.split("## First minutes", 1)[1].split("```", 2)[1]
    order = ["--suite smoke", "greenbench report", "greenbench dashboard"]
    found = [first.find(what) for what in order]
    assert all(i >= 0 for i in found) and found[0] < found[1] and found[0] < found[2], found
    assert "posttrain" not in first


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_every_local_link_resolves_inside_the_repository(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address or an anchor of the page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name}: {target} is outside the repository"
        assert path.exists(), f"{page.name}: {target} does not exist"
