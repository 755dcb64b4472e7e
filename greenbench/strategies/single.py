"""One process, one device: the reference every parallel strategy is checked against."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from greenbench.strategies.base import DataParallel
from greenbench.strategies.schedule import StepSchedule

if TYPE_CHECKING:
    from greenbench.sources.contract import Loss, ModelSource


class Single(DataParallel):
    """The whole minibatch on one rank (a data-parallel degree of 1)."""

    name = "single"

    def parallelize(self, model: ModelSource) -> torch.nn.Module:
        return model.build(self.ctx.device)

    def schedule(self, loss: Loss) -> StepSchedule:
        return StepSchedule(self.ctx, self.comm, loss)
