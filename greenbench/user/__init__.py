"""User workloads: a team's own model and training step measured like greenbench's workloads.

`contract` is what a user's entry point returns (`Workload`, `Batch`, `WorkloadContext`);
`entry` finds and checks it (``mypkg.bench:workload`` or a name registered under the
``greenbench.workloads`` entry-point group). On the ranks it is trained through the workload
contract every workload keeps (`greenbench.sources.user`). See docs/user-workloads.md.
"""

from greenbench.user.contract import (
    FLOPS_COUNTED,
    FLOPS_GIVEN,
    USER_PREFIX,
    USER_STRATEGIES,
    Batch,
    Workload,
    WorkloadContext,
)

__all__ = [
    "FLOPS_COUNTED",
    "FLOPS_GIVEN",
    "USER_PREFIX",
    "USER_STRATEGIES",
    "Batch",
    "Workload",
    "WorkloadContext",
]
