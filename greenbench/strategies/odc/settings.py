"""The ``odc`` section: where ODC's ranks meet. Counts in a run's identity only away from its
default, so every configuration stored before it keeps its key."""

from __future__ import annotations

from greenbench.config import section, setting

#: ranks meet once per minibatch (ODC) or before every microbatch as well (lockstep)
MEETINGS = ("minibatch", "microbatch")


@section("odc", "ODC (strategy=odc): where its ranks meet.", built_in_only=True)
class ODCSettings:
    meet: str = setting(
        "minibatch",
        "minibatch (ODC: ranks meet twice per minibatch) | microbatch (lockstep: also before "
        "every microbatch, with data.balance=same-count: ODC's engine in FSDP's lockstep)",
        choices=MEETINGS,
    )
