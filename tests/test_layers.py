"""The package's layers (docs/architecture.md) are a checked contract: `lint-imports` passes on
the package, and adding a forbidden import (torch in the store) makes it fail. Runs on a copy,
so nothing is touched."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    shutil.which("lint-imports") is None, reason="import-linter is not installed"
)


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))  # the copy shadows the installed package
    return subprocess.run(
        [shutil.which("lint-imports") or "lint-imports", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "greenbench", tmp_path / "greenbench", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_contracts_hold_and_a_forbidden_import_breaks_them(tree: Path) -> None:
    clean = lint(tree)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "BROKEN" not in clean.stdout
    views = tree / "greenbench" / "store" / "views.py"
    views.write_text(views.read_text() + "\nimport torch  # noqa: E402,F401\n")
    broken = lint(tree)
    assert broken.returncode != 0
    assert "import no torch" in broken.stdout and "BROKEN" in broken.stdout
    assert "greenbench.store.views -> torch" in broken.stdout


def test_a_rank_importing_the_launcher_breaks_the_contracts(tree: Path) -> None:
    mesh = tree / "greenbench" / "rank" / "mesh.py"
    mesh.write_text(mesh.read_text() + "\nimport greenbench.launcher.launch  # noqa: E402,F401\n")
    broken = lint(tree)
    assert broken.returncode != 0
    assert "A rank imports nothing of the launcher's side BROKEN" in broken.stdout
    assert "greenbench.rank.mesh -> greenbench.launcher.launch" in broken.stdout
