"""Parallel strategies, one file each; adding one is a new file and a line here."""

from __future__ import annotations

from greenbench.strategies.base import DataParallel, DistContext, StepTimes, Strategy
from greenbench.strategies.ddp import DDP
from greenbench.strategies.fsdp import FSDP
from greenbench.strategies.hybrid import Hybrid
from greenbench.strategies.odc import ODC
from greenbench.strategies.single import Single
from greenbench.strategies.skippipe import SkipPipe

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (Single, DDP, FSDP, ODC, Hybrid, SkipPipe)
}

__all__ = ["STRATEGIES", "DataParallel", "DistContext", "StepTimes", "Strategy"]
