"""What an ODC run needs of its settings (without torch: the spec runs it)."""

from __future__ import annotations

from greenbench.config import Config
from greenbench.errors import SpecError
from greenbench.strategies.checks import check_data_parallel, check_ranks
from greenbench.strategies.odc.settings import ODCSettings
from greenbench.vocabulary import Layout


def odc_unsupported(config: Config, layout: Layout) -> str | None:
    """Why ODC cannot run ``config`` where it would run (`StrategyCard.unsupported`): its
    shared-memory transport (``odc.transport=shm``, the default) reaches CPU ranks on one host
    only; ``odc.transport=cuda-ipc`` reaches CUDA ranks on one node only;
    ``odc.transport=p2p`` reaches CUDA ranks and other hosts."""
    odc = config[ODCSettings]
    if odc is not None and odc.transport == "cuda-ipc":
        if config.run.device != "cuda":
            return "strategy=odc with odc.transport=cuda-ipc shares GPU memory: set device=cuda"
        if config.run.nnodes > 1:
            return (
                "strategy=odc with odc.transport=cuda-ipc runs within one node: "
                "odc.transport=p2p across nodes"
            )
        return None
    if odc is not None and odc.transport != "shm":
        return None
    if config.run.device == "cuda":
        return "strategy=odc with odc.transport=shm runs on CPU ranks: odc.transport=p2p on CUDA"
    if config.run.nnodes > 1:
        return (
            "strategy=odc with odc.transport=shm runs within one host: odc.transport=p2p across "
            "hosts"
        )
    return None


def check_odc(config: Config, layout: Layout) -> None:
    """SpecError for lockstep (``odc.meet=microbatch``) on a split whose ranks may run
    different microbatch counts (where ODC's transport reaches: `odc_unsupported`)."""
    check_data_parallel(config, layout)
    check_ranks("odc", layout)
    odc = config[ODCSettings]
    if odc is not None and odc.meet == "microbatch" and config.data.balance == "balanced-cost":
        raise SpecError(
            "odc.meet=microbatch meets before every microbatch, so every rank needs the same "
            "count: set data.balance=same-count"
        )
