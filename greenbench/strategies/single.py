"""One process, one device: the reference every parallel strategy is checked against."""

from __future__ import annotations

import torch

from greenbench.strategies.base import Strategy


class Single(Strategy):
    name = "single"

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model
