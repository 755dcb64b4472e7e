"""A card per strategy: what the spec needs to know of it without importing torch.

A card names the strategy, the layout degrees it can apply (``applies``; any other must be 1)
and the one that takes the ranks the others leave (``fills``; None: one rank), its data balance
when ``data.balance`` is ``auto`` (`greenbench.data.packing`), its settings check, its own
settings section (if it has one), a one-line doc, and where its torch implementation lives
(``module:Class``, imported by `load` on the ranks only). The spec resolves a run's layout
from ``applies`` and ``fills`` (`greenbench.vocabulary.resolve_layout`) and checks its
settings with ``validate``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from greenbench.strategies.checks import check_data_parallel
from greenbench.strategies.hybrid.checks import check_hybrid
from greenbench.strategies.odc.checks import check_odc
from greenbench.strategies.skippipe.checks import check_skippipe
from greenbench.strategies.skippipe.settings import SkipPipeSettings
from greenbench.vocabulary import DEGREES, Layout


@dataclass(frozen=True, slots=True)
class StrategyCard:
    """One strategy as the spec sees it (see the module docstring)."""

    name: str
    doc: str
    implementation: str  # "module:Class" of its `Strategy` subclass
    applies: frozenset[str] = frozenset()
    fills: str | None = None
    balance: str = "same-count"
    check: Callable[[Mapping[str, Any], Layout], None] = check_data_parallel
    #: the strategy's own settings section (`greenbench.config.section`), where it has one
    settings: type | None = None

    def validate(self, settings: Mapping[str, Any], layout: Layout) -> None:
        """Raise SpecError for settings this strategy cannot run with."""
        self.check(settings, layout)

    def default_layout(self, world: int) -> Layout:
        """The layout of ``world`` ranks when nothing else is given."""
        return Layout(**{self.fills: world}) if self.fills else Layout()

    def load(self) -> type:
        """The strategy's torch implementation, a `greenbench.strategies.base.Strategy`
        subclass (imported now: the card itself names no torch module)."""
        module, cls = self.implementation.split(":")
        return getattr(importlib.import_module(module), cls)


CARDS: tuple[StrategyCard, ...] = (
    StrategyCard(
        name="single",
        doc="The whole minibatch on one rank: the reference every strategy is checked against.",
        implementation="greenbench.strategies.single:Single",
    ),
    StrategyCard(
        name="ddp",
        doc="Replicated data parallelism with torch's DistributedDataParallel.",
        implementation="greenbench.strategies.ddp:DDP",
        applies=frozenset({"dp_replicate"}),
        fills="dp_replicate",
    ),
    StrategyCard(
        name="fsdp",
        doc="Fully sharded data parallelism with FSDP2, ranks meeting at every microbatch.",
        implementation="greenbench.strategies.fsdp:FSDP",
        applies=frozenset({"dp_shard"}),
        fills="dp_shard",
    ),
    StrategyCard(
        name="odc",
        doc="On-demand communication: sharded parameters got and gradients pushed one-sidedly.",
        implementation="greenbench.strategies.odc.strategy:ODC",
        applies=frozenset({"dp_shard"}),
        fills="dp_shard",
        balance="balanced-cost",
        check=check_odc,
    ),
    StrategyCard(
        name="hybrid",
        doc="Data, tensor, pipeline and context parallelism composed over one device mesh.",
        implementation="greenbench.strategies.hybrid.strategy:Hybrid",
        applies=frozenset(DEGREES),
        fills="dp_shard",
        check=check_hybrid,
    ),
    StrategyCard(
        name="skippipe",
        doc="Pipeline parallelism whose microbatches skip stages along scheduled paths.",
        implementation="greenbench.strategies.skippipe.strategy:SkipPipe",
        applies=frozenset({"pp"}),
        fills="pp",
        check=check_skippipe,
        settings=SkipPipeSettings,
    ),
)
