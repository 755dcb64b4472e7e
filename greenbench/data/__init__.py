"""Synthetic training data: a learnable token source, length distributions, packing, batches.

A run's `DataPlan` makes its minibatches; strategies decide how ranks share them.
Registries: ``LENGTH_DISTRIBUTIONS`` (lengths.py), ``COST_MODELS`` and ``ASSIGN_MODES``
(packing.py). Adding a length distribution or cost model is one entry in its module's dict.

Every name loads its module when first named: the registries and the packing arithmetic
(numpy, scipy) and the token source, batches and data plan (torch), so that reading the
settings' section stays light (``greenbench measure`` reads it and must start quickly).
"""

from __future__ import annotations

import importlib
from typing import Any

#: the names this package gives, and the module of each, loaded on first use: the registries
#: and the packing arithmetic need numpy and scipy, the token source, batches and data plan torch,
#: and reading the settings' section (``greenbench.data.settings``) needs none of them
_LAZY = {
    "LENGTH_DISTRIBUTIONS": "lengths",
    "draw_lengths": "lengths",
    "sample_lengths": "lengths",
    "ASSIGN_MODES": "packing",
    "COST_MODELS": "packing",
    "assign_to_ranks": "packing",
    "pack_sequences": "packing",
    "sequence_cost": "packing",
    "step_cost": "packing",
    "karmarkar_karp": "partition",
    "Microbatch": "batches",
    "StepBatch": "batches",
    "collate_microbatch": "batches",
    "make_step_batches": "batches",
    "MarkovSource": "markov",
    "DataPlan": "feed",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"greenbench.data.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'greenbench.data' has no attribute {name!r}")


__all__ = [
    "ASSIGN_MODES",
    "COST_MODELS",
    "LENGTH_DISTRIBUTIONS",
    "DataPlan",
    "MarkovSource",
    "Microbatch",
    "StepBatch",
    "assign_to_ranks",
    "collate_microbatch",
    "draw_lengths",
    "karmarkar_karp",
    "make_step_batches",
    "pack_sequences",
    "sample_lengths",
    "sequence_cost",
    "step_cost",
]
