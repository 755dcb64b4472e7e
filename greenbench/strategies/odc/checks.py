"""What an ODC run needs of its settings (without torch: the spec runs it)."""

from __future__ import annotations

from greenbench.config import Config
from greenbench.errors import SpecError
from greenbench.strategies.checks import check_data_parallel, check_ranks
from greenbench.strategies.odc.settings import ODCSettings
from greenbench.vocabulary import Layout


def check_odc(config: Config, layout: Layout) -> None:
    """SpecError where ODC's transport is not built (CUDA IPC, cross-host), and for lockstep
    (``odc.meet=microbatch``) on a split whose ranks may run different microbatch counts."""
    check_data_parallel(config, layout)
    check_ranks("odc", layout)
    if config.run.device == "cuda":
        raise SpecError(
            "strategy=odc runs on CPU ranks for now: its CUDA IPC transport is not built"
        )
    if config.run.nnodes > 1:
        raise SpecError(
            "strategy=odc runs within one host for now: its cross-host transport is not built"
        )
    odc = config[ODCSettings]
    if odc is not None and odc.meet == "microbatch" and config.data.balance == "balanced-cost":
        raise SpecError(
            "odc.meet=microbatch meets before every microbatch, so every rank needs the same "
            "count: set data.balance=same-count"
        )
