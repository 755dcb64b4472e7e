"""Where a rank runs and how its time is read: `DistContext` (rank, device, precision),
`StepTimes` (one step's seconds split by what the rank was doing) and `synchronize` (wait for
queued device work before a clock or a counter is read).

They sit below the strategies, the workloads and the rank's loop, which all use them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class DistContext:
    """Where this rank runs."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    dtype: torch.dtype  # autocast dtype; float32 means no autocast

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


@dataclass(slots=True)
class StepTimes:
    """Seconds one rank spent in one step, split by what it was doing."""

    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (a no-op on CPU) before reading a clock or a counter."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
