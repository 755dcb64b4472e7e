"""The packages that train and measure take typed configuration, never the settings mapping: no
function under strategies/, models/, data/, sources/, energy/, launcher/ or rank/ has a
parameter that is the flat mapping of dotted settings (named ``settings`` or ``s`` and typed as
a dict or Mapping)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "greenbench"
PACKAGES = ("strategies", "models", "data", "sources", "energy", "launcher", "rank")
MAPPINGS = ("dict", "Mapping", "MutableMapping")


def _takes_the_mapping(arg: ast.arg) -> bool:
    if arg.arg not in ("settings", "s"):
        return False
    note = ast.unparse(arg.annotation) if arg.annotation is not None else "dict"
    return note.split("[")[0].split(".")[-1] in MAPPINGS


def test_no_function_takes_the_settings_mapping() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                    if any(_takes_the_mapping(a) for a in args):
                        found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}")
    assert not found, "take the typed config (or the values needed) instead:\n" + "\n".join(found)
