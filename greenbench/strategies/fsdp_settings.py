"""The ``fsdp`` section: which transport carries FSDP2's collectives, and its check. Counts in a
run's identity only away from its default, so every configuration stored before it keeps its
key."""

from __future__ import annotations

from greenbench.config import Config, section, setting
from greenbench.errors import SpecError
from greenbench.strategies.checks import check_data_parallel, check_ranks
from greenbench.vocabulary import Layout

TRANSPORTS = ("gloo", "shared-memory")


@section("fsdp", "FSDP (strategy=fsdp): what carries its collectives.", built_in_only=True)
class FSDPSettings:
    transport: str = setting(
        "gloo",
        "gloo (the process group's collectives) | shared-memory (the same collectives, each "
        "still a meeting of every rank, with the bytes copied through ODC's shared memory; "
        "CPU ranks of one host)",
        choices=TRANSPORTS,
    )


def check_fsdp(config: Config, layout: Layout) -> None:
    """SpecError where the shared-memory transport cannot carry the collectives."""
    check_data_parallel(config, layout)
    check_ranks("fsdp", layout)
    section = config[FSDPSettings]
    if section is None or section.transport == "gloo":
        return
    if config.run.device == "cuda":
        raise SpecError("fsdp.transport=shared-memory runs on CPU ranks (no CUDA IPC transport)")
    if config.run.nnodes > 1:
        raise SpecError("fsdp.transport=shared-memory runs within one host")
