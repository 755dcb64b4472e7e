"""What a hybrid run needs of its settings and layout (without torch: the spec runs it).

Whether the layout fits the model (tp divides what the family splits, pp at most its layers, cp
divides the sequence, the family has a context-parallel form that composes with its tp split)
is the model card's one rule, `greenbench.models.layout_fits`. Replicas (HSDP) replicate the
FSDP shards, so they need some: ``dp_shard × cp`` above 1."""

from __future__ import annotations

from greenbench.config import Config
from greenbench.errors import SpecError
from greenbench.models import family
from greenbench.strategies.checks import check_data_parallel
from greenbench.vocabulary import Layout

#: stages each rank holds under ``train.pp_schedule=interleaved-1f1b`` (the hybrid pipeline's
#: `VIRTUAL`, kept here without torch)
INTERLEAVED_STAGES = 2


def check_hybrid(config: Config, layout: Layout) -> None:
    """SpecError for a layout the hybrid strategy cannot apply to the run's model and data."""
    check_data_parallel(config, layout)
    if layout.dp_replicate > 1 and layout.dp_shard * layout.cp == 1:
        raise SpecError(
            f"strategy=hybrid replicates shards (HSDP): layout.dp_replicate="
            f"{layout.dp_replicate} needs layout.dp_shard or layout.cp above 1 (replicas of a "
            "tensor- or pipeline-parallel model without shards are not applied; replicas alone "
            "are strategy=ddp)"
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
        if config.train.pp_schedule == "interleaved-1f1b":
            check_interleaved(config, layout, count)


def check_interleaved(config: Config, layout: Layout, count: int) -> None:
    """Interleaved 1F1B cuts the blocks into `INTERLEAVED_STAGES` stages per rank, and runs
    the microbatches in rounds of ``pp`` (torch's ``ScheduleInterleaved1F1B``): a whole number
    of rounds."""
    stages = layout.pp * INTERLEAVED_STAGES
    n_layers = family(config.model.family).preset(config.model.size).n_layers
    if stages > n_layers:
        raise SpecError(
            f"train.pp_schedule=interleaved-1f1b holds {INTERLEAVED_STAGES} stages per rank: "
            f"layout.pp={layout.pp} needs {stages} blocks, but {config.model.family}/"
            f"{config.model.size} has {n_layers}"
        )
    rounds = max(1, count // layout.pp)
    if count % rounds:
        raise SpecError(
            f"train.pp_schedule=interleaved-1f1b runs microbatches in rounds: the {count} "
            f"microbatches per data-parallel rank do not split into {rounds} equal rounds "
            f"(use a multiple of layout.pp={layout.pp}, or fewer than {2 * layout.pp})"
        )
