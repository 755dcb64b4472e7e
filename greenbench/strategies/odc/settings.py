"""The ``odc`` section: where ODC's ranks meet, and how they reach each other's shards. Counts
in a run's identity only away from its defaults, so every configuration stored before it keeps
its key."""

from __future__ import annotations

from greenbench.config import section, setting

#: ranks meet once per minibatch (ODC) or before every microbatch as well (lockstep)
MEETINGS = ("minibatch", "microbatch")
#: shared memory between CPU ranks of one host, point-to-point messages (any host, CUDA too), or
#: device memory shared by CUDA IPC between the GPUs of one node
TRANSPORTS = ("shm", "p2p", "cuda-ipc")


@section(
    "odc",
    "ODC (strategy=odc): where its ranks meet, how they reach each other's shards.",
    built_in_only=True,
)
class ODCSettings:
    meet: str = setting(
        "minibatch",
        "minibatch (ODC: ranks meet twice per minibatch) | microbatch (lockstep: also before "
        "every microbatch, with data.balance=same-count: ODC's engine in FSDP's lockstep)",
        choices=MEETINGS,
    )
    transport: str = setting(
        "shm",
        "shm (shared memory and a drain thread: CPU ranks of one host; a get is a one-sided "
        "copy) | p2p (torch.distributed point-to-point messages to a server thread on each "
        "owner: across hosts, and on CUDA over NCCL) | cuda-ipc (device memory shared by CUDA "
        "IPC between the GPUs of one node; a get is a one-sided device copy; never run on a "
        "GPU yet)",
        choices=TRANSPORTS,
    )
