"""The workload one rank of a run trains (`rank_workload`): read from the run's settings here, at
the top of the rank's call chain, and handed down as a `TrainingWorkload`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from greenbench.settings.runspec import RunSpec
from greenbench.sources.contract import TrainingWorkload
from greenbench.vocabulary import is_user_workload

if TYPE_CHECKING:
    import torch


def rank_workload(spec: RunSpec, device: torch.device) -> TrainingWorkload:
    """The model source, batch source, loss and FLOPs of ``spec``'s workload on ``device``."""
    config = spec.config
    seed = config.run.seed
    compile_blocks = config.train.compile == "on"
    if is_user_workload(spec.workload):  # a user's entry point names the workload
        from greenbench.sources.user import user_workload
        from greenbench.user.entry import load

        own = load(spec.workload).workload
        mine = dict(config.user)
        return user_workload(
            own, mine, seed, device,
            compile=compile_blocks, flops_per_token=own.flops_per_token_for(mine),
        )  # fmt: skip
    from greenbench.data import DataPlan
    from greenbench.models import FAMILIES, ModelBuilder
    from greenbench.sources.builtin import builtin_workload

    model = config.model
    builder = ModelBuilder(
        FAMILIES[model.family],
        model.size,
        seed,
        model.scan,
        compile=compile_blocks,
        fused=model.liger == "on",
        checkpoint=config.train.activation_checkpointing == "full",
    )
    plan = DataPlan.from_section(config.data, seed=seed, vocab_size=builder.info.vocab_size)
    held_out = config.eval.docs if config.train.until == "target" else 0
    return builtin_workload(builder, plan, held_out)
