"""Synthetic training data: a learnable token source, length distributions, packing, batches.

A run's `DataPlan` makes its minibatches; strategies decide how ranks share them.
Registries: ``LENGTH_DISTRIBUTIONS`` (lengths.py), ``COST_MODELS`` and ``ASSIGN_MODES``
(packing.py). Adding a length distribution or cost model is one entry in its module's dict.
"""

from greenbench.data.batches import Microbatch, StepBatch, collate_microbatch, make_step_batches
from greenbench.data.feed import DataPlan
from greenbench.data.lengths import LENGTH_DISTRIBUTIONS, draw_lengths, sample_lengths
from greenbench.data.markov import MarkovSource
from greenbench.data.packing import (
    ASSIGN_MODES,
    COST_MODELS,
    assign_to_ranks,
    pack_sequences,
    sequence_cost,
    step_cost,
)
from greenbench.data.partition import karmarkar_karp

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
