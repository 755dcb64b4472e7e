"""Mamba-2's torch side (`greenbench.models.card.FamilyParts`): the builder, its blocks, its
pipeline stages, the refusal of a tensor-parallel split and its context-parallel scan. Reached
through the card (`greenbench.models.mamba2.card`)."""

from __future__ import annotations

from greenbench.models.card import FamilyParts
from greenbench.models.mamba2.context_parallel import enable_cp_scan
from greenbench.models.mamba2.model import build
from greenbench.models.mamba2.parallel import TENSOR_PARALLEL, blocks, pipeline_stage

PARTS = FamilyParts(
    build=build,
    blocks=blocks,
    tensor_parallel=TENSOR_PARALLEL,
    pipeline_stage=pipeline_stage,
    context_parallel=enable_cp_scan,
)
