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
    s = spec.settings
    compile_blocks = s["train.compile"] == "on"
    if is_user_workload(spec.workload):  # a user's entry point names the workload
        from greenbench.sources.user import user_workload
        from greenbench.user.contract import own_settings
        from greenbench.user.entry import load

        own = load(spec.workload).workload
        mine = own_settings(s)
        return user_workload(
            own, mine, s["seed"], device,
            compile=compile_blocks, flops_per_token=own.flops_per_token_for(mine),
        )  # fmt: skip
    from greenbench.data import DataPlan
    from greenbench.models import FAMILIES, ModelBuilder
    from greenbench.sources.builtin import builtin_workload

    builder = ModelBuilder(
        FAMILIES[s["model.family"]],
        s["model.size"],
        s["seed"],
        s["model.scan"],
        compile=compile_blocks,
        fused=s["model.liger"] == "on",
    )
    plan = DataPlan.from_section(
        spec.config.data, seed=s["seed"], vocab_size=builder.info.vocab_size
    )
    return builtin_workload(builder, plan)
