"""What a hybrid run needs of its settings and layout (without torch: the spec runs it).

The families with a context-parallel form are read from the planner's torch-free presets
(`greenbench.plan.shapes`); ``tests/strategies/test_cards.py`` holds them to the forms
`greenbench.strategies.hybrid.cp` implements."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from greenbench.errors import SpecError
from greenbench.plan.shapes import PRESETS
from greenbench.strategies.checks import check_data_parallel
from greenbench.vocabulary import Layout


def context_parallel_families() -> frozenset[str]:
    """The model families the hybrid strategy can split the sequence of."""
    return frozenset(
        family
        for family, presets in PRESETS.items()
        if all(shape.context_parallel for shape in presets.values())
    )


def check_hybrid(settings: Mapping[str, Any], layout: Layout) -> None:
    """SpecError for a layout the hybrid strategy cannot apply to the run's model and data."""
    check_data_parallel(settings, layout)
    if layout.dp_replicate > 1:
        raise SpecError(
            f"strategy=hybrid does not replicate (layout.dp_replicate={layout.dp_replicate}):"
            " shard instead (layout.dp_shard), or replicate alone with strategy=ddp"
        )
    if layout.cp > 1:
        families = context_parallel_families()
        if settings["model.family"] not in families:
            raise SpecError(
                f"strategy=hybrid has no context parallelism for {settings['model.family']} "
                f"(layout.cp={layout.cp}); families with one: {', '.join(sorted(families))}"
            )
    if settings["model.family"] == "mamba" and layout.tp > 1 and layout.cp > 1:
        raise SpecError(
            "strategy=hybrid cannot combine layout.tp and layout.cp for mamba "
            "(both replace the mixer's forward); use one of them"
        )
    if layout.pp > 1:
        per_rank = settings["data.global_batch"] // layout.dp
        if per_rank % settings["data.micro_batch"]:
            raise SpecError(
                f"layout.pp={layout.pp} needs whole microbatches: the "
                f"{per_rank} sequences per data-parallel rank are not a multiple of "
                f"data.micro_batch={settings['data.micro_batch']}"
            )
        count = per_rank // settings["data.micro_batch"]
        if count < layout.pp:
            raise SpecError(
                f"layout.pp={layout.pp} needs at least {layout.pp} microbatches per "
                f"data-parallel rank, but data.global_batch / (dp × data.micro_batch) = "
                f"{count}"
            )
