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


def test_one_warm_up_step_gets_a_second_to_judge_the_window_by() -> None:
    """The first step pays for compilation and allocation: with only one warm-up step, the
    window's length would be judged by it (an H200 ran a 26 ms window meant to last 1 s), so
    one more unmeasured step is taken, where the window is to be lengthened at all."""
    from greenbench.rank.worker import warmup_steps
    from greenbench.settings.run import TrainSettings

    assert warmup_steps(TrainSettings(warmup_steps=1)) == 2
    assert warmup_steps(TrainSettings(warmup_steps=1, min_window_s=0.0)) == 1
    assert warmup_steps(TrainSettings(warmup_steps=0)) == 0
    assert warmup_steps(TrainSettings(warmup_steps=3)) == 3
