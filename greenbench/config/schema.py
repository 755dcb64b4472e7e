"""The settings of every section together: defaults, conversion of written values, the checks each
setting declares, a configuration's identity, and the typed view of a run's settings.

A `Schema` is built from section classes (`greenbench.config.section`); greenbench's own is
assembled in `greenbench.settings` from the sections each owner declares. A run's settings travel
as a flat mapping of dotted keys (suite files, ``--set``, the stored configuration, the JSON each
rank receives); `Schema.config` gives the typed `Config` that code reads.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from greenbench.config.field import NON_NEGATIVE, POSITIVE, Setting
from greenbench.config.section import read_section, section_name, section_settings
from greenbench.errors import SpecError

T = TypeVar("T")

#: the prefix of a user workload's own settings, which its workload declares
USER_PREFIX = "user."


class Config:
    """A run's settings as typed sections: ``config.data.seq_len``, ``config[DataSettings]``.

    A section a workload does not have (a user workload has no ``model`` or ``data``) is None;
    ``user`` holds a user workload's own ``user.*`` settings by their names after ``user.``."""

    __slots__ = ("_sections", "user")

    def __init__(self, sections: dict[str, Any], user: dict[str, Any]) -> None:
        self._sections = sections
        self.user = user

    def __getattr__(self, name: str) -> Any:
        try:
            return self._sections[name or ""]
        except KeyError:
            raise AttributeError(f"no settings section {name!r}") from None

    def __getitem__(self, cls: type[T]) -> T:
        return self._sections[section_name(cls)]  # type: ignore[no-any-return]

    @property
    def run(self) -> Any:
        """The run's own settings (undotted keys: strategy, nproc, device, …)."""
        return self._sections[""]

    def __repr__(self) -> str:
        return f"Config({self._sections!r}, user={self.user!r})"


class Schema:
    """Every setting of ``sections`` by its dotted key."""

    def __init__(self, sections: Iterable[type]) -> None:
        self.sections = tuple(sections)
        self.settings: dict[str, Setting] = {}
        for cls in self.sections:
            for s in section_settings(cls):
                if s.key in self.settings:
                    raise ValueError(f"setting {s.key!r} is declared twice")
                self.settings[s.key] = s

    def __contains__(self, key: object) -> bool:
        return key in self.settings

    def defaults(self, *, built_in: bool = True) -> dict[str, Any]:
        """Every setting's default; without those about greenbench's own models and data where
        ``built_in`` is false (a user workload's)."""
        return {k: s.default for k, s in self.settings.items() if built_in or not s.built_in_only}

    def check_key(self, key: str, table: Mapping[str, Any] | None = None) -> None:
        """SpecError naming the closest setting, unless ``key`` is one (of ``table``)."""
        known = self.settings if table is None else table
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(f"unknown setting {key!r}{hint}; `greenbench list settings` shows them")

    def coerce(self, key: str, value: Any, table: Mapping[str, Any] | None = None) -> Any:
        """``value`` (from TOML or the command line) as the setting's type, or SpecError.
        ``table``: the workload's settings and defaults (a user workload's ``user.*`` are
        typed by the defaults it declares)."""
        self.check_key(key, table)
        own = self.settings.get(key)
        default = own.default if own is not None else (table or {})[key]
        if isinstance(value, list):
            if not value:
                raise SpecError(f"setting {key!r} sweeps no values (an empty list)")
            if any(isinstance(v, (list, dict)) for v in value):
                raise SpecError(f"setting {key!r}: a sweep is a flat list of values, got {value!r}")
            return [self.coerce(key, v, table) for v in value]
        if isinstance(value, dict):
            raise SpecError(f"setting {key!r} expects a value, got a table {value!r}")
        if own is not None and own.auto_int:
            return _auto_int(key, value)
        return _typed(key, value, type(default))

    def check(self, settings: Mapping[str, Any]) -> None:
        """What each present setting declares of its value on its own: choices, bounds, an
        integer or ``auto``. SpecError on the first that fails."""
        for key, s in self.settings.items():
            if key not in settings:
                continue
            value = settings[key]
            if s.choices and value not in s.choices:
                raise SpecError(f"{key}={value!r} is not one of {', '.join(s.choices)}")
        for key, s in self.settings.items():
            if key in settings and s.registry is not None:
                names = sorted(s.registry())
                if settings[key] not in names:
                    raise SpecError(f"{key}={settings[key]!r} is not one of {', '.join(names)}")
        for key, s in self.settings.items():
            if key not in settings or s.bound is None:
                continue
            value = settings[key]
            if s.bound == POSITIVE and value != "auto" and not value > 0:
                raise SpecError(f"{key} must be > 0, got {value!r}")
            if s.bound == NON_NEGATIVE and not value >= 0:
                raise SpecError(f"{key} must be >= 0, got {value!r}")
        for key, s in self.settings.items():
            if s.auto_int and key in settings:
                value = settings[key]
                if value != "auto" and not value >= 1:
                    raise SpecError(f"{key} must be >= 1 or 'auto', got {value!r}")

    def check_sections(self, settings: Mapping[str, Any]) -> None:
        """Each present section's own checks of several settings at once (``check``)."""
        config = self.config(settings)
        for cls in self.sections:
            made = config._sections.get(section_name(cls))
            if made is not None and hasattr(made, "check"):
                made.check(config)

    def identity(self, settings: Mapping[str, Any], workload: str) -> dict[str, Any]:
        """The settings that define "the same configuration", plus its workload: each setting
        as its field declares (`greenbench.config.field.Identity`); a user workload's own
        ``user.*`` settings always."""
        out = {}
        for key, value in settings.items():
            s = self.settings.get(key)
            if s is None or s.identity.counts(key, settings, s.default):
                out[key] = value
        return out | {"workload": workload}

    def config(self, settings: Mapping[str, Any]) -> Config:
        """The typed view of ``settings``: a section with none of its settings present is None
        (a user workload's ``model``); one with some present takes defaults for the rest."""
        sections: dict[str, Any] = {}
        for cls in self.sections:
            present = any(s.key in settings for s in section_settings(cls))
            sections[section_name(cls)] = read_section(cls, settings) if present else None
        user = {
            k.removeprefix(USER_PREFIX): v for k, v in settings.items() if k.startswith(USER_PREFIX)
        }
        return Config(sections, user)

    def rows(self) -> list[tuple[str, Any, str, str]]:
        """(key, default, choices, doc) of every setting, in declaration order."""
        return [
            (
                k,
                s.default,
                ", ".join(s.choices or sorted(s.registry() if s.registry else ())),
                s.doc,
            )
            for k, s in self.settings.items()
        ]


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"size": "tiny"}}`` → ``{"model.size": "tiny"}`` (dotted keys pass through):
    settings written as a suite file's tables, as their dotted keys."""
    flat: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


def _auto_int(key: str, value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise SpecError(f"setting {key!r} expects an int or 'auto', got {value!r}") from None


def _typed(key: str, value: Any, kind: type) -> Any:
    """``value`` as ``kind`` (bool, int, float or str), or SpecError naming the setting."""
    try:
        if kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("true", "1", "yes")
            return bool(value)
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if kind is float:
            if isinstance(value, bool) or not math.isfinite(float(value)):
                raise ValueError(value)
            return float(value)
        if not isinstance(value, str):
            raise ValueError(value)
        return value
    except (TypeError, ValueError):
        raise SpecError(
            f"setting {key!r} expects a finite {kind.__name__}, got {value!r}"
            if kind is float
            else f"setting {key!r} expects {kind.__name__}, got {value!r}"
        ) from None
