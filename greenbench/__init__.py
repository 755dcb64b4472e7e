"""greenbench: energy-aware benchmarking of LLM training workloads.

For a user's own code: `Workload`, `Batch` and `WorkloadContext` describe a workload an entry
point returns (``greenbench run --workload mypkg.bench:workload``), and `measure` measures one's
own training loop (``with greenbench.measure(label=...) as m: ... m.step(tokens=n)``). They are
imported on first use, so ``import greenbench`` (and the CLI) stays light.

The standard workloads are the package ``greenbench.workloads``: the repository's top-level
``workloads/`` folder, mapped into the package by an install and, in a source checkout used
without one, by `greenbench.checkout`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from greenbench.checkout import map_workloads

__version__ = "0.1.0"

#: public names and the module that defines each
_LAZY = {
    "Batch": "greenbench.user.contract",
    "Workload": "greenbench.user.contract",
    "WorkloadContext": "greenbench.user.contract",
    "measure": "greenbench.measuring.session",
}

__all__ = ["Batch", "Workload", "WorkloadContext", "__version__", "measure"]

map_workloads(Path(__file__).resolve().parent)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'greenbench' has no attribute {name!r}")
