"""benchmarks/skippipe_sim.py prints the four times beside the published ones and says whether
the goals hold (exit 0), and runs the 4-node topology with --small."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "skippipe_sim.py"


@functools.cache
def benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("skippipe_sim_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_published_comparison(capsys) -> None:
    assert benchmark().main([]) == 0
    out = capsys.readouterr().out
    for name, published in benchmark().PUBLISHED_S.items():
        assert name in out and f"{published:.2f}" in out
    assert "ordering full > random > without CA > SkipPipe: holds" in out
    assert "goal ≤ 0.45: holds" in out
    assert "modelled" in out and "not measured" in out


def test_small_topology(capsys) -> None:
    assert benchmark().main(["--small"]) == 0
    out = capsys.readouterr().out
    assert "4 nodes" in out and "published" not in out.split("\n")[1]
