"""How a rank sizes its measured window from its warm-up steps."""

from __future__ import annotations

import torch

from greenbench.rank.worker import DistContext, steps_per_window
from greenbench.settings.run import TrainSettings

ONE_RANK = DistContext(
    rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), dtype=torch.float32
)
SETTINGS = TrainSettings(steps=3, min_window_s=1.0, max_steps=200)


def test_the_first_warm_up_step_does_not_size_the_window():
    # a first step that compiled for 30 s says nothing about the 0.1 s steps that follow
    assert steps_per_window(SETTINGS, [30.0, 0.1], ONE_RANK) == 11  # ceil(1.1 / 0.1)
    assert steps_per_window(SETTINGS, [30.0, 0.1, 0.12], ONE_RANK) == 10  # ceil(1.1 / 0.12)
    assert steps_per_window(SETTINGS, [0.1], ONE_RANK) == 11  # one warm-up step: itself
    assert steps_per_window(SETTINGS, [], ONE_RANK) == 3
    assert steps_per_window(SETTINGS, [1.0, 0.001], ONE_RANK) == 200  # bounded by max_steps
