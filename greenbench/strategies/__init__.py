"""Parallel strategies: the torch-free registry of their cards (`STRATEGIES`), and one module or
package per strategy holding its torch implementation (`greenbench.strategies.base.Strategy`:
a parallelize function, a data-assignment policy and a step schedule), imported only by the
ranks that run it (`StrategyCard.load`). Adding one is its own package (its card, settings check,
settings section and torch implementation) and one import and one entry in
`greenbench.strategies.cards` (docs/contributing.md).
"""

from __future__ import annotations

from greenbench.strategies.card import StrategyCard
from greenbench.strategies.cards import CARDS

STRATEGIES: dict[str, StrategyCard] = {card.name: card for card in CARDS}

__all__ = ["STRATEGIES", "StrategyCard"]
