"""Settings are read through their typed sections, never by spelling their dotted keys: no
Python module outside the sections that declare them names a setting's dotted key in a string.
(Store migrations rewrite configurations as they were stored at their time, and are history.)"""

from __future__ import annotations

import ast
from pathlib import Path

from greenbench.config import is_section
from greenbench.settings import SCHEMA

ROOT = Path(__file__).resolve().parents[2]
HISTORY = ("greenbench/store/migrations/",)


def _declares_a_section(tree: ast.Module, module: str) -> bool:
    """Whether ``module`` declares a settings section (its predicates read dotted keys)."""
    import importlib

    mod = importlib.import_module(module)
    return any(is_section(v) and v.__module__ == module for v in vars(mod).values())


def test_no_module_spells_a_settings_key() -> None:
    keys = {k for k in SCHEMA.settings if "." in k}
    found = []
    for folder in ("greenbench", "workloads"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(HISTORY):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            hits = [
                f"{rel}:{node.lineno}: {node.value}"
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and node.value in keys
            ]
            if hits:
                module = rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
                module = module.replace("workloads.", "greenbench.workloads.", 1)
                if not _declares_a_section(tree, module):
                    found += hits
    assert not found, "read these through the typed config instead:\n" + "\n".join(found)
