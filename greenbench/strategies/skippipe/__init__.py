"""SkipPipe: pipeline parallelism whose microbatches skip stages along scheduled paths."""

from __future__ import annotations

from greenbench.strategies.skippipe.strategy import SkipPipe

__all__ = ["SkipPipe"]
