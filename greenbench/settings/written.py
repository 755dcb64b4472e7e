"""Settings as they are written, in suite files and ``--set key=value``: each value converted
to its setting's type (`greenbench.config.Schema.coerce`), a comma-separated ``--set`` value
made a sweep, a user workload's ``user.*`` settings kept as written until their workload types
them (`greenbench.spec.fit_layer`)."""

from __future__ import annotations

import re
from typing import Any

from greenbench.config import USER_PREFIX, flatten
from greenbench.errors import SpecError
from greenbench.settings import DEFAULTS, SCHEMA


def parse_assignment(text: str) -> tuple[str, Any]:
    """Parse one ``--set key=value``; a comma-separated value becomes a sweep (a list)."""
    if "=" not in text:
        raise SpecError(f"--set expects key=value, got {text!r}")
    key, raw = (part.strip() for part in text.split("=", 1))
    if not key.startswith(USER_PREFIX):  # a user setting is checked by its workload
        check_key(key)
    if "," in raw:
        values = [coerce(key, item.strip()) for item in raw.split(",") if item.strip()]
        if not values:
            raise SpecError(f"--set {key}={raw!r} sweeps no values (give a,b,… or one value)")
        return key, values
    return key, coerce(key, raw)


def coerce(key: str, value: Any, table: dict[str, Any] | None = None) -> Any:
    """Convert a value (from TOML or the command line) to the setting's type, or fail clearly.

    ``table`` is the workload's settings (default: greenbench's own); a ``user.*`` setting not
    in it is kept as given, to be converted once its workload is known (`fit_layer`)."""
    table = DEFAULTS if table is None else table
    if key.startswith(USER_PREFIX) and key not in table:
        check_user_key(key)
        return value
    return SCHEMA.coerce(key, value, table)


def check_key(key: str, table: dict[str, Any] | None = None) -> None:
    SCHEMA.check_key(key, DEFAULTS if table is None else table)


def check_user_key(key: str) -> None:
    """A ``user.*`` key is a plain dotted name (which workload has it is checked later)."""
    if not re.fullmatch(r"user\.[A-Za-z_][\w.-]*", key):
        raise SpecError(f"setting {key!r}: write a user setting as user.NAME")


def coerce_all(table: dict[str, Any], where: str) -> dict[str, Any]:
    """Every setting of a (nested) table converted, errors prefixed by ``where``."""
    out = {}
    for k, v in flatten(table).items():
        try:
            out[k] = coerce(k, v)
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
    return out
