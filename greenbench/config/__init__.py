"""Typed, sectioned configuration: each owner declares its settings once, as a section of
fields with types, defaults, choices, bounds, a one-line doc and an identity rule; a `Schema`
of sections converts and checks written values, reduces a configuration to its identity and
gives the typed `Config` view of a run's settings. Plain data: no torch."""

from greenbench.config.field import (
    ALWAYS,
    AWAY_FROM_DEFAULT,
    NEVER,
    NON_NEGATIVE,
    POSITIVE,
    Identity,
    Setting,
    setting,
    when,
)
from greenbench.config.schema import USER_PREFIX, Config, Schema, flatten
from greenbench.config.section import (
    is_section,
    read_section,
    section,
    section_name,
    section_settings,
    setting_of,
)

__all__ = [
    "ALWAYS",
    "AWAY_FROM_DEFAULT",
    "NEVER",
    "NON_NEGATIVE",
    "POSITIVE",
    "USER_PREFIX",
    "Config",
    "Identity",
    "Schema",
    "Setting",
    "flatten",
    "is_section",
    "read_section",
    "section",
    "section_name",
    "section_settings",
    "setting",
    "setting_of",
    "when",
]
