"""A settings section: a frozen dataclass of `setting` fields that one owner declares (a
strategy, a model family's shared settings, the data, the meters, the run itself).

``@section("skippipe", "…")`` names the section; each field's dotted key is ``SECTION.FIELD``
(the run's own section, named ``""``, has undotted keys), unless the field names its key. A
section may define ``check(self, config)``: the checks that read several settings at once,
raising `greenbench.errors.SpecError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from greenbench.config.field import Setting

T = TypeVar("T")


def section(name: str, doc: str, *, built_in_only: bool = False) -> Callable[[type[T]], type[T]]:
    """Make ``cls`` a frozen dataclass section called ``name``. ``built_in_only``: every field
    is about greenbench's own models and data (a user workload has none of them)."""

    def wrap(cls: type[T]) -> type[T]:
        made: Any = dataclasses.dataclass(frozen=True)(cls)
        settings = []
        for f in dataclasses.fields(made):
            meta = f.metadata.get("setting")
            if not isinstance(meta, Setting):
                raise TypeError(f"{cls.__name__}.{f.name} is not a setting(...) field")
            key = meta.key or (f.name if not name else f"{name}.{f.name}")
            settings.append(
                dataclasses.replace(
                    meta, key=key, name=f.name, built_in_only=meta.built_in_only or built_in_only
                )
            )
        made.__section__ = name
        made.__section_doc__ = doc
        made.__settings__ = tuple(settings)
        return made

    return wrap


def section_name(cls: type) -> str:
    """The name ``cls`` was declared under (``""`` for the run's own settings)."""
    return str(cls.__section__)  # type: ignore[attr-defined]


def section_settings(cls: type) -> tuple[Setting, ...]:
    """The settings ``cls`` declares, with their dotted keys."""
    return tuple(cls.__settings__)  # type: ignore[attr-defined]


def setting_of(cls: type, name: str) -> Setting:
    """The setting field ``name`` of section ``cls`` declares (its key, choices, doc …)."""
    for s in section_settings(cls):
        if s.name == name:
            return s
    raise KeyError(f"{cls.__name__} has no setting {name!r}")


def read_section(cls: type[T], settings: Mapping[str, Any]) -> T:
    """Section ``cls`` read from a run's flat settings (dotted keys), its defaults where a key
    is absent: how code that receives the flat mapping (a strategy's ``configure``) reads the
    settings of its own section, typed."""
    fields = {s.name: settings[s.key] for s in section_settings(cls) if s.key in settings}
    return cls(**fields)


def is_section(cls: Any) -> bool:
    return isinstance(cls, type) and hasattr(cls, "__settings__")
