"""What a strategy's card is: everything the spec needs to know of a strategy without importing
torch.

A card names the strategy, the layout degrees it can apply (``applies``; any other must be 1)
and the one that takes the ranks the others leave (``fills``; None: one rank), its data balance
when ``data.balance`` is ``auto`` (`greenbench.data.packing`), its settings check, its own
settings section (if it has one), a one-line doc, and where its torch implementation lives
(``module:Class``, imported by `load` on the ranks only). The spec resolves a run's layout
from ``applies`` and ``fills`` (`greenbench.vocabulary.resolve_layout`) and checks its
settings, as their typed sections (`greenbench.config.Config`), with ``validate``. The
registry of cards is `greenbench.strategies.cards`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from greenbench.config import Config
from greenbench.strategies.checks import check_data_parallel
from greenbench.vocabulary import Layout


@dataclass(frozen=True, slots=True)
class StrategyCard:
    """One strategy as the spec sees it (see the module docstring)."""

    name: str
    doc: str
    implementation: str  # "module:Class" of its `Strategy` subclass
    applies: frozenset[str] = frozenset()
    fills: str | None = None
    balance: str = "same-count"
    check: Callable[[Config, Layout], None] = check_data_parallel
    #: the strategy's own settings section (`greenbench.config.section`), where it has one
    settings: type | None = None
    #: why a valid configuration cannot run on its device or hosts with what is built (None:
    #: it can); the launcher stores such a configuration ``skipped`` with the reason, and the
    #: rest of its suite runs (`unsupported`)
    unsupported_by: Callable[[Config, Layout], str | None] | None = None

    def validate(self, config: Config, layout: Layout) -> None:
        """Raise SpecError for settings (``config``, the run's typed view) this strategy cannot
        run with on ``layout``."""
        self.check(config, layout)

    def unsupported(self, config: Config, layout: Layout) -> str | None:
        """Why this strategy cannot run ``config`` on its device or hosts (a configuration that
        is valid, only not runnable there with what is built), or None. Not a SpecError: a suite
        run on GPUs keeps its other configurations (`greenbench.launcher.preflight`)."""
        return None if self.unsupported_by is None else self.unsupported_by(config, layout)

    def default_layout(self, world: int) -> Layout:
        """The layout of ``world`` ranks when nothing else is given."""
        return Layout(**{self.fills: world}) if self.fills else Layout()

    def load(self) -> type:
        """The strategy's torch implementation, a `greenbench.strategies.base.Strategy`
        subclass (imported now: the card itself names no torch module)."""
        module, cls = self.implementation.split(":")
        return getattr(importlib.import_module(module), cls)
