"""The package's layers (docs/architecture.md) are a checked contract: `lint-imports` passes on
the package, and adding a forbidden import (torch in the store) makes it fail. Runs on a copy,
so nothing is touched.

The copy is laid out as the package is installed: the repository's top-level ``workloads/``
folder becomes ``greenbench/workloads/`` there, as setup.py maps it. At the repository's root,
grimp reads the greenbench/ folder alone and cannot see that package (its layer is optional in
pyproject.toml for that reason); here the same contracts check it, and a workload importing a
layer above its own breaks them."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from greenbench import checkout

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    shutil.which("lint-imports") is None, reason="import-linter is not installed"
)


def package_dir() -> dict[str, str]:
    """setup.py's ``PACKAGE_DIR``: each package that lives outside greenbench/, and its folder."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    (value,) = (
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "PACKAGE_DIR" for t in node.targets)
    )
    return ast.literal_eval(value)


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
    """greenbench as installed: its folder, with each mapped package copied to where it goes."""
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "greenbench", tmp_path / "greenbench", ignore=skip)
    for package, folder in package_dir().items():
        shutil.copytree(ROOT / folder, tmp_path.joinpath(*package.split(".")), ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_setup_maps_the_package_a_checkout_maps() -> None:
    assert package_dir() == {checkout.PACKAGE: checkout.FOLDER}


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


def test_a_workload_importing_a_layer_above_breaks_the_layers(tree: Path) -> None:
    module = tree / "greenbench" / "workloads" / "hybrid.py"
    module.write_text(module.read_text() + "\nfrom greenbench.spec import DEFAULTS  # noqa\n")
    broken = lint(tree)
    assert broken.returncode != 0
    assert "greenbench.workloads is not allowed to import greenbench.spec" in broken.stdout
    assert "greenbench.workloads.hybrid -> greenbench.spec" in broken.stdout
