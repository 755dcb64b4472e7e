"""The registry of strategy cards (`CARDS`, read as `greenbench.strategies.STRATEGIES`): what
the spec needs to know of each strategy without importing torch (`StrategyCard`,
`greenbench.strategies.card`).

The built-in strategies' cards are written here; a new strategy's card lives in its own package
(``strategies/<name>/card.py``, a ``CARD``) and joins the registry with one import and one entry
in `CARDS`.
"""

from __future__ import annotations

from greenbench.strategies.card import StrategyCard
from greenbench.strategies.ddp_settings import DDPSettings, check_ddp
from greenbench.strategies.fsdp_settings import FSDPSettings, check_fsdp
from greenbench.strategies.hybrid.checks import check_hybrid
from greenbench.strategies.odc.checks import check_odc, odc_unsupported
from greenbench.strategies.odc.settings import ODCSettings
from greenbench.strategies.skippipe.checks import check_skippipe
from greenbench.strategies.skippipe.settings import SkipPipeSettings
from greenbench.vocabulary import DEGREES

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
        check=check_ddp,
        settings=DDPSettings,
    ),
    StrategyCard(
        name="fsdp",
        doc="Fully sharded data parallelism with FSDP2, ranks meeting at every microbatch.",
        implementation="greenbench.strategies.fsdp:FSDP",
        applies=frozenset({"dp_shard"}),
        fills="dp_shard",
        check=check_fsdp,
        settings=FSDPSettings,
    ),
    StrategyCard(
        name="odc",
        doc="On-demand communication: sharded parameters got and gradients pushed one-sidedly.",
        implementation="greenbench.strategies.odc.strategy:ODC",
        applies=frozenset({"dp_shard"}),
        fills="dp_shard",
        balance="balanced-cost",
        check=check_odc,
        settings=ODCSettings,
        unsupported_by=odc_unsupported,
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
