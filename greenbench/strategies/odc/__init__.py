"""ODC, on-demand communication: the strategy, its units and the transport between ranks."""

from __future__ import annotations

from greenbench.strategies.odc.strategy import ODC

__all__ = ["ODC"]
