"""Parallel strategies: the torch-free registry of their cards (`STRATEGIES`), and one module or
package per strategy holding its torch implementation (`greenbench.strategies.base.Strategy`:
a parallelize function, a data-assignment policy and a step schedule), imported only by the
ranks that run it (`StrategyCard.load`). Adding one is a new module and a card in
`greenbench.strategies.cards`.
"""

from __future__ import annotations

from greenbench.strategies.cards import CARDS, StrategyCard

STRATEGIES: dict[str, StrategyCard] = {card.name: card for card in CARDS}

__all__ = ["STRATEGIES", "StrategyCard"]
