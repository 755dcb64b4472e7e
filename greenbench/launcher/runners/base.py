"""What a runner is: the one object that knows how a configuration is run.

The launcher (`greenbench.launcher.launch`) chooses a configuration's runner once
(`greenbench.launcher.runners.runner_for`) and asks it everything that depends on how the
configuration runs: what it occupies (`Shape`), the peak its MFU is relative to and the device
type it names (`Peak`), why it cannot run on this machine, the run record it begins with, and
its run (a `RunOutcome`). Everything else (checks of the whole suite, the store, resuming,
progress, interruption) is the launcher's and the same for every runner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from greenbench.launcher.phases import NO_PHASES, Phases
from greenbench.results import RunOutcome, RunRecord
from greenbench.settings.runspec import RunSpec

if TYPE_CHECKING:
    from greenbench.launcher.power_limits import LimitPlan


@dataclass(frozen=True, slots=True)
class Shape:
    """What a configuration occupies: ``nodes``, ``ranks_per_node``, and whether it starts rank
    processes at all (a simulation runs in the launcher alone, on one node)."""

    nodes: int
    ranks_per_node: int
    launches_ranks: bool


@dataclass(frozen=True, slots=True)
class Peak:
    """The peak FLOP/s per device a run's MFU is relative to (None: unknown), where it came
    from, the device type the run names, and what measuring it cost (a CPU calibration)."""

    flops: float | None
    source: str | None
    device_type: str
    #: seconds measuring it took now (0: a cached figure; None: not known)
    calibration_s: float | None = None


@dataclass(frozen=True, slots=True)
class RunContext:
    """What the launcher hands a runner for one run: its id, this machine's fingerprint, the
    region's carbon intensity (g/kWh, where from), the configuration's peak, the power limit
    held around it, the rendezvous of a multi-node run, where failed runs keep their logs, and
    when the run's turn began (for its start-up cost), and where the runner tells what it is
    doing (`greenbench.launcher.phases`)."""

    run_id: str
    fingerprint: Mapping[str, Any]
    carbon: tuple[float, str]
    peak: Peak
    limit: LimitPlan | None = None
    rdzv: dict[str, Any] | None = None
    logs_dir: Path | None = None
    #: when this run's turn began (seconds since the epoch): the greenbench process's start for
    #: a session's first configuration, else the end of the one before (`HarnessCost`)
    began_at: float | None = None
    phases: Phases = NO_PHASES


class Runner(Protocol):
    """How configurations of one kind are run. A runner is made once per launcher session (it
    may keep what it learns of the machine, such as the idle power) and chosen once per
    configuration: the first registered runner that `takes` it."""

    #: the runner's name, as the registry lists it
    name: ClassVar[str]

    @classmethod
    def takes(cls, spec: RunSpec) -> bool:
        """Whether this runner runs ``spec``."""
        ...

    def shape(self, spec: RunSpec) -> Shape:
        """What ``spec`` occupies (nodes, ranks per node, whether ranks are started)."""
        ...

    def peak(self, spec: RunSpec, *, measure: bool = True) -> Peak:
        """The peak ``spec``'s MFU is relative to, and the device type it names; ``measure``
        False (a preview) gives what is known without measuring (a cached calibration, a
        datasheet figure), the flops None where nothing is."""
        ...

    def why_not_here(self, spec: RunSpec, peak: Peak, devices: int | None) -> str | None:
        """Why ``spec`` cannot run on this machine (``devices``: the ranks it may use), or None."""
        ...

    def record(self, spec: RunSpec, ctx: RunContext) -> RunRecord:
        """The ``runs`` row ``spec``'s run begins with (`greenbench.launcher.runners.record`)."""
        ...

    def run(self, spec: RunSpec, ctx: RunContext) -> RunOutcome:
        """Run ``spec`` and return what the store keeps: an ``ok`` outcome, or a ``failed`` one
        that says which rank failed and why. Raises GreenbenchError for a run that could not
        be made at all, and lets KeyboardInterrupt through."""
        ...

    def follow(self, spec: RunSpec, ctx: RunContext) -> None:
        """On a node other than node 0 of a multi-node run: start this node's ranks of
        ``spec`` and store nothing (node 0 gathers and stores). Raises GreenbenchError when
        they fail."""
        ...
