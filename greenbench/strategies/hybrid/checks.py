"""What a hybrid run needs of its settings and layout (without torch: the spec runs it).

Whether the layout fits the model (tp divides what the family splits, pp at most its layers, cp
divides the sequence, the family has a context-parallel form that composes with its tp split)
is the model card's one rule, `greenbench.models.layout_fits`."""

from __future__ import annotations

from greenbench.config import Config
from greenbench.errors import SpecError
from greenbench.models import family
from greenbench.strategies.checks import check_data_parallel
from greenbench.vocabulary import Layout


def check_hybrid(config: Config, layout: Layout) -> None:
    """SpecError for a layout the hybrid strategy cannot apply to the run's model and data."""
    check_data_parallel(config, layout)
    if layout.dp_replicate > 1:
        raise SpecError(
            f"strategy=hybrid does not replicate (layout.dp_replicate={layout.dp_replicate}):"
            " shard instead (layout.dp_shard), or replicate alone with strategy=ddp"
        )
    model, data = config.model, config.data
    misfit = family(model.family).layout_fits(
        model.size, layout.tp, layout.pp, layout.cp, data.seq_len
    )
    if misfit:
        raise SpecError(misfit)
    if layout.pp > 1:
        per_rank = data.global_batch // layout.dp
        if per_rank % data.micro_batch:
            raise SpecError(
                f"layout.pp={layout.pp} needs whole microbatches: the "
                f"{per_rank} sequences per data-parallel rank are not a multiple of "
                f"data.micro_batch={data.micro_batch}"
            )
        count = per_rank // data.micro_batch
        if count < layout.pp:
            raise SpecError(
                f"layout.pp={layout.pp} needs at least {layout.pp} microbatches per "
                f"data-parallel rank, but data.global_batch / (dp × data.micro_batch) = "
                f"{count}"
            )
