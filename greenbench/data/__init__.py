"""Synthetic training data: a learnable token source, length distributions, packing, batches.

A run's `DataPlan` makes its minibatches; strategies decide how ranks share them.
Registries: ``LENGTH_DISTRIBUTIONS`` (lengths.py), ``COST_MODELS`` and ``ASSIGN_MODES``
(packing.py). Adding a length distribution or cost model is one entry in its module's dict.

The registries and the packing arithmetic import no torch; the token source, batches and the
data plan (torch tensors) load when first named, so reading the settings' choices stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from greenbench.data.lengths import LENGTH_DISTRIBUTIONS, draw_lengths, sample_lengths
from greenbench.data.packing import (
    ASSIGN_MODES,
    COST_MODELS,
    assign_to_ranks,
    pack_sequences,
    sequence_cost,
    step_cost,
)
from greenbench.data.partition import karmarkar_karp

#: names this package gives from its torch modules, loaded on first use
_LAZY = {
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
