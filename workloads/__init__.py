"""The standard workloads, one module each, and the suites that pick them (``suites/*.toml``).

This folder is the repository's top-level ``workloads/``, installed as the package
``greenbench.workloads`` (setup.py maps it there). Each module defines one `Workload`
(`greenbench.workload`): the question it answers, the settings it fixes and those it sweeps.
A new standard workload is a module here and one line in `WORKLOADS`.

`get_workload` finds a workload by name: one of these, one an installed package registers, or a
user's own entry point.
"""

from __future__ import annotations

from greenbench.errors import SpecError
from greenbench.workload import Workload, from_user
from greenbench.workloads import (
    comm_efficient,
    convergence,
    data_parallel,
    fault_tolerance,
    fsdp_vs_odc,
    hybrid,
    power_limit,
    skippipe,
    transformer_vs_mamba,
)

#: greenbench's own workloads by name, in the order `greenbench list workloads` shows them
WORKLOADS: dict[str, Workload] = {
    module.WORKLOAD.name: module.WORKLOAD
    for module in (
        transformer_vs_mamba,
        data_parallel,
        fsdp_vs_odc,
        hybrid,
        skippipe,
        power_limit,
        convergence,
        comm_efficient,
        fault_tolerance,
    )
}


def get_workload(name: str) -> Workload:
    """A workload by name: greenbench's own, a name a package registered under the
    ``greenbench.workloads`` entry-point group, or a user entry point ``module.path:attribute``
    (`greenbench.user`)."""
    if name in WORKLOADS:
        return WORKLOADS[name]
    from greenbench.user import entry

    if entry.is_entry_point(name) or name in entry.registered():
        return from_user(entry.load(name))
    registered = sorted(entry.registered())
    raise SpecError(
        f"unknown workload {name!r} (known: {', '.join(sorted(WORKLOADS))}"
        + (f"; registered by installed packages: {', '.join(registered)}" if registered else "")
        + "; or your own as module.path:attribute)"
    )
