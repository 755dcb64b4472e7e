"""How the launcher and the worker treat a user workload's configuration (`greenbench.user`):
what it resolves and what its run is stored as (what each rank trains is its
`greenbench.sources` workload, as a built-in one's).

A user workload has no model family and no greenbench data, so the columns those fill for a
built-in run come from the workload: ``model_family`` is ``user``, ``model_size`` the workload's
own name, ``seq_len`` its declared one (0 where it has none), ``lengths`` ``user``. Its package,
version and source commit are stored in ``runs.versions`` beside greenbench's own (not part of the
identity, so base and head of a pull request remain one configuration). Whether its FLOPs per
token were given or counted is said in every repeat's ``mfu_note``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from greenbench.config import setting_of
from greenbench.settings.run import TrainSettings
from greenbench.settings.runspec import RunSpec
from greenbench.user.contract import FLOPS_COUNTED, FLOPS_GIVEN

if TYPE_CHECKING:
    from greenbench.results import RepeatResult
    from greenbench.user.entry import LoadedWorkload

#: ``runs.model_family`` and ``runs.lengths`` of a user workload's runs
USER_FAMILY = "user"


def loaded(spec: RunSpec) -> LoadedWorkload:
    from greenbench.user.entry import load

    return load(spec.workload)


def resolve_compile(spec: RunSpec) -> RunSpec:
    """``train.compile: auto`` is off for a user workload (its model was not written for it);
    ``on`` compiles its blocks (or the whole model)."""
    s = dict(spec.settings)
    if spec.config.train.compile == "auto":
        s[setting_of(TrainSettings, "compile").key] = "off"
    return replace(spec, settings=s)


def record_fields(spec: RunSpec, versions: dict[str, Any]) -> dict[str, Any]:
    """The run record's columns a user workload fills in its own way (module docstring)."""
    import json

    found = loaded(spec)
    return {
        "model_family": USER_FAMILY,
        "model_size": found.workload.name,
        "seq_len": found.workload.seq_len,
        "lengths": USER_FAMILY,
        "versions": json.dumps(versions | {"workload": found.provenance()}, default=str),
    }


def flops_note(spec: RunSpec) -> str:
    """Where the FLOPs behind a user workload's MFU came from."""
    return FLOPS_COUNTED if loaded(spec).workload.flops_per_token is None else FLOPS_GIVEN


def with_flops_note(spec: RunSpec, repeats: list[RepeatResult]) -> list[RepeatResult]:
    note = flops_note(spec)
    return [replace(r, mfu_note="; ".join(filter(None, (note, r.mfu_note)))) for r in repeats]
