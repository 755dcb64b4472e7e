"""Which kind of workload a run is: greenbench's own, a user's workload (named by its entry
point), or a user's own measurement (an own loop, a whole process)."""

from __future__ import annotations

#: the ``strategy`` of a user's own measurement, which no greenbench workload trains: an own loop
#: measured by ``greenbench.measure`` (workload ``loop/NAME``), or a whole process measured by
#: ``greenbench measure -- CMD`` (workload ``process/NAME``)
OWN_LOOP_STRATEGY = "own-loop"
WHOLE_PROCESS_STRATEGY = "whole-process"
#: each own-measurement strategy, in words
OWN_MEASUREMENT_KINDS = {OWN_LOOP_STRATEGY: "own loop", WHOLE_PROCESS_STRATEGY: "whole process"}


def is_user_workload(workload: str) -> bool:
    """Whether a workload is a user's own, named by its entry point ``module.path:attribute``
    (greenbench's own workloads have plain names, never a colon)."""
    return ":" in workload
