"""One setting of a configuration section: its type, default, choices, bounds, a one-line doc,
and when it counts toward a run's identity.

A section is a frozen dataclass whose fields are made with `setting`; `greenbench.config.section`
turns the class into a section and names each field's dotted key. The dotted keys stay the
surface of suite files, ``--set`` and the stored configuration; the fields are where each
setting is described once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: a predicate over a configuration's flat settings (stored configurations included, which may
#: lack settings added after them: read them with ``.get``)
Predicate = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class Identity:
    """When a setting counts toward the identity of a configuration (`greenbench.config.schema`).

    ``always``: every run has it in its identity; ``never``: it does not change what is measured
    (how often, how long to wait, test instrumentation); ``away_from_default``: only where it is
    set to something else than its default, so every configuration stored before the setting
    existed keeps its key; ``when``: only where ``predicate`` holds of the whole configuration.
    """

    kind: str
    predicate: Predicate | None = None

    def counts(self, key: str, settings: Mapping[str, Any], default: Any) -> bool:
        """Whether ``key`` belongs in the identity of ``settings``."""
        if self.kind == "always":
            return True
        if self.kind == "never":
            return False
        if self.kind == "away_from_default":
            return settings.get(key, default) != default
        assert self.predicate is not None
        return self.predicate(settings)


ALWAYS = Identity("always")
NEVER = Identity("never")
AWAY_FROM_DEFAULT = Identity("away_from_default")


def when(predicate: Predicate) -> Identity:
    """Counts toward the identity only where ``predicate`` holds of the configuration."""
    return Identity("when", predicate)


#: what a setting's value must be beside its type: above zero, or zero and above
POSITIVE = "positive"
NON_NEGATIVE = "non-negative"


@dataclass(frozen=True, slots=True)
class Setting:
    """A setting as its section declares it; ``key`` is filled in by `section`."""

    default: Any
    doc: str
    choices: tuple[str, ...] = ()
    #: the names a registry holds (strategies, families, …), read when a value is checked
    registry: Callable[[], Iterable[str]] | None = None
    bound: str | None = None  # POSITIVE | NON_NEGATIVE
    #: an integer that may also be ``auto`` (decided when the configuration is resolved)
    auto_int: bool = False
    identity: Identity = AWAY_FROM_DEFAULT
    #: about greenbench's own models, data and schedules, which a user workload does not have
    built_in_only: bool = False
    key: str = ""
    #: the field's name in its section (its attribute)
    name: str = ""

    @property
    def kind(self) -> type:
        """The Python type values are converted to (``int`` for an auto integer)."""
        return int if self.auto_int else type(self.default)


def setting(
    default: Any,
    doc: str,
    *,
    choices: tuple[str, ...] = (),
    registry: Callable[[], Iterable[str]] | None = None,
    bound: str | None = None,
    auto_int: bool = False,
    identity: Identity = AWAY_FROM_DEFAULT,
    built_in_only: bool = False,
    key: str = "",
) -> Any:
    """A field of a settings section (see `Setting`). ``key`` overrides the dotted key the
    section would give (``SECTION.FIELD``), for a setting that reads as another section's.
    A setting added later keeps the default ``identity`` (``away_from_default``), so the key of
    every configuration that does not set it stays what it was."""
    meta = Setting(
        default=default,
        doc=doc,
        choices=choices,
        registry=registry,
        bound=bound,
        auto_int=auto_int,
        identity=identity,
        built_in_only=built_in_only,
        key=key,
    )
    return dataclasses.field(default=default, metadata={"setting": meta})
