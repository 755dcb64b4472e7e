"""What a workload is to greenbench: a question, base settings, and the settings it sweeps.

A workload reads like an experiment plan: what is held fixed, what varies. The standard ones are
defined in ``greenbench.workloads`` (the top-level ``workloads/`` folder of the repository, one
module each); suites pick workloads and override settings, and ``greenbench run --workload NAME``
runs one with ``--set`` overrides. A user's own workload (``--workload mypkg.bench:workload``,
or a name its package registers) is described the same way (`from_user`), from the object its
entry point returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from greenbench.config import flatten
from greenbench.user.contract import USER_PREFIX, user_key
from greenbench.user.entry import LoadedWorkload


@dataclass(frozen=True, slots=True)
class Workload:
    """One workload: its name, the question it answers, the settings it fixes (``base``) and
    those it sweeps (``sweep``: each a list of values, every combination a configuration),
    each written as a suite file's tables are (``{"data": {"seq_len": 1024}}``)."""

    name: str
    question: str
    base: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, list[Any]] = field(default_factory=dict)
    #: a user's own workload, loaded from its entry point (None for greenbench's own)
    user: LoadedWorkload | None = None

    def __post_init__(self) -> None:
        # written as TOML's tables are ({"data": {"seq_len": 1024}}) or with dotted keys
        object.__setattr__(self, "base", flatten(self.base))
        object.__setattr__(self, "sweep", flatten(self.sweep))


def from_user(loaded: LoadedWorkload) -> Workload:
    """A user workload as greenbench's own are described: named by its entry point (the name
    its runs are stored under), its question, the settings it fixes and sweeps (its own named
    bare or as ``user.NAME``)."""
    own = loaded.workload
    declared = {key.removeprefix(USER_PREFIX) for key in own.settings}

    def key(name: str) -> str:
        return user_key(name) if name in declared else name

    return Workload(
        name=loaded.ref,
        question=own.question or f"{own.name}: a user workload ({loaded.ref})",
        base={key(k): v for k, v in own.base.items()},
        sweep={key(k): list(v) for k, v in own.sweep.items()},
        user=loaded,
    )
