"""Injected faults (the ``debug.*`` test settings): make a chosen rank fail, hang, die or run out
of memory, at the start of the first measured step or at one of its microbatches.

The rank's loop arms them (`Faults.arm`); a fault at a microbatch fires from the step schedule's
``before_microbatch`` hook (`greenbench.strategies.schedule`), so no strategy knows of faults.
A rank numbered -1 means no such fault.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Faults:
    """The ranks that fail, hang, die or run out of memory, and the microbatch of the first
    measured step at which they do (0: before the step)."""

    fail_rank: int = -1
    hang_rank: int = -1
    kill_rank: int = -1
    oom_rank: int = -1
    at_microbatch: int = 0

    def arm(self, rank: int) -> Callable[[int], None] | None:
        """Inject the faults of ``rank`` now, or return the hook that injects them at
        microbatch ``at_microbatch`` of the step about to run (mid-minibatch)."""
        at = self.at_microbatch
        if at == 0:
            self.inject_faults(rank)
            return None
        return lambda i: self.inject_faults(rank) if i == at else None

    def inject_faults(self, rank: int) -> None:
        """Make ``rank`` fail, hang, die or run out of memory, as its settings say."""
        if self.fail_rank == rank:
            raise RuntimeError(f"injected failure on rank {rank} (debug.fail_rank)")
        if self.hang_rank == rank:
            while True:
                time.sleep(60)
        if self.kill_rank == rank:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.oom_rank == rank:
            torch.empty(1 << 46, dtype=torch.uint8)  # 64 TiB: the allocator refuses, as a real OOM
