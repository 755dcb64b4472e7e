"""Hybrid layouts: DP × TP × PP × CP over one device mesh (`Hybrid`)."""

from __future__ import annotations

from greenbench.strategies.hybrid.strategy import Hybrid

__all__ = ["Hybrid"]
