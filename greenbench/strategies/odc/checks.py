"""What an ODC run needs of its settings (without torch: the spec runs it)."""

from __future__ import annotations

from greenbench.config import Config
from greenbench.errors import SpecError
from greenbench.strategies.checks import check_data_parallel
from greenbench.vocabulary import Layout


def check_odc(config: Config, layout: Layout) -> None:
    """SpecError where ODC's transport is not built (CUDA IPC, cross-host)."""
    check_data_parallel(config, layout)
    if config.run.device == "cuda":
        raise SpecError(
            "strategy=odc runs on CPU ranks for now: its CUDA IPC transport is not built"
        )
    if config.run.nnodes > 1:
        raise SpecError(
            "strategy=odc runs within one host for now: its cross-host transport is not built"
        )
