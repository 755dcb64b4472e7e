"""The runners a configuration can be run by, and the choice of one, made once per configuration.

A runner (`base.Runner`) is everything that depends on how a configuration runs: torchrun ranks
measured on this machine (`torchrun`, the normal path) or SkipPipe's discrete-event simulator
(`simulated`). `RUNNERS` lists them in the order they are asked: the first that takes a
configuration runs it, and the last takes any. Another way of running (say, ranks restarted
elastically after a failure) is one module with one runner class, and its line in `RUNNERS`
ahead of the runner it would otherwise fall to.
"""

from __future__ import annotations

from greenbench.launcher.runners.base import Peak, RunContext, Runner, Shape
from greenbench.launcher.runners.simulated import SimulatedRunner
from greenbench.launcher.runners.torchrun import TorchrunRunner
from greenbench.settings.runspec import RunSpec

#: every runner, asked in this order; the last takes any configuration
RUNNERS: tuple[type[Runner], ...] = (
    SimulatedRunner,
    TorchrunRunner,
)

__all__ = ["RUNNERS", "Peak", "RunContext", "Runner", "Runners", "Shape", "runner_for"]


def kind_of(spec: RunSpec) -> type[Runner]:
    """The runner class that runs ``spec``: the first in `RUNNERS` that takes it."""
    return next(kind for kind in RUNNERS if kind.takes(spec))


def runner_for(spec: RunSpec) -> Runner:
    """A fresh runner for ``spec`` (one that asks it alone; a session keeps its `Runners`)."""
    return kind_of(spec)()


class Runners:
    """The runners of one launcher session: each made once, when a configuration first needs
    it, so that what it learns of the machine (the idle power) serves the whole session."""

    def __init__(self) -> None:
        self._made: dict[type[Runner], Runner] = {}

    def for_spec(self, spec: RunSpec) -> Runner:
        """The runner of ``spec``."""
        kind = kind_of(spec)
        if kind not in self._made:
            self._made[kind] = kind()
        return self._made[kind]
