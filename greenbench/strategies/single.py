"""One process, one device: the reference every parallel strategy is checked against."""

from __future__ import annotations

import torch

from greenbench.models import ModelBuilder
from greenbench.strategies.base import DataParallel


class Single(DataParallel):
    """The whole minibatch on one rank (a data-parallel degree of 1)."""

    name = "single"

    def apply(self, builder: ModelBuilder) -> torch.nn.Module:
        return builder.build(self.ctx.device)
