"""Suite files: a named list of workloads with shared settings, and settings of their own per
device (``[defaults.cuda]``, ``[entries.cuda]``), read from the TOML greenbench ships beside the
standard workloads (``workloads/suites/``) or from a user's file. `greenbench.spec.expand_suite`
turns one into configurations."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import tomllib

from greenbench.config import flatten
from greenbench.errors import SpecError
from greenbench.settings.written import coerce_all

#: the devices a suite may give settings of their own (``[defaults.cuda]``, ``[entries.cuda]``)
SUITE_DEVICES = ("cpu", "cuda")


@dataclass(frozen=True, slots=True)
class SuiteEntry:
    """One workload of a suite, its overrides, and its overrides on one device only."""

    workload: str
    overrides: dict[str, Any] = field(default_factory=dict)
    on_device: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SuiteSpec:
    """A named list of workload entries with shared defaults. ``on_device`` holds defaults
    that apply only where a configuration runs on that device (``cpu`` or ``cuda``), so one
    suite measures models sized for the machine it runs on."""

    name: str
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)
    entries: tuple[SuiteEntry, ...] = ()
    on_device: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: folders (absolute) put in front of the import path, where the suite's user workloads live
    python_path: tuple[str, ...] = ()
    #: the suite's ``[cluster]`` table as written: what its jobs ask a cluster's scheduler for
    #: (checked by `greenbench.cluster.options` when a cluster executor runs the suite)
    cluster: dict[str, Any] = field(default_factory=dict)
    #: the file it was read from: a shipped suite's in the installed package, or the user's
    source: str = ""


#: the suites greenbench ships, as package data beside the standard workloads (the
#: repository's ``workloads/suites/*.toml``), so that ``--suite NAME`` works after a regular
#: install, from any directory
SUITES_PACKAGE = "greenbench.workloads.suites"


def packaged_suites() -> dict[str, Traversable]:
    """The shipped suites by name."""
    folder = resources.files(SUITES_PACKAGE)
    return {
        entry.name.removesuffix(".toml"): entry
        for entry in folder.iterdir()
        if entry.name.endswith(".toml") and entry.is_file()
    }


def available_suites() -> list[str]:
    return sorted(packaged_suites())


def load_suite(name_or_path: str) -> SuiteSpec:
    """Load a suite by name (one greenbench ships) or by path to the user's TOML file."""
    path = Path(name_or_path)
    source: Path | Traversable = path
    if not (path.suffix == ".toml" and path.exists()):
        shipped = packaged_suites()
        if name_or_path not in shipped:
            known = ", ".join(sorted(shipped)) or "none"
            raise SpecError(
                f"unknown suite {name_or_path!r} (known: {known}; or give a .toml path)"
            )
        source = shipped[name_or_path]
    where = str(path) if source is path else f"suite {name_or_path} (shipped with greenbench)"
    try:
        data = tomllib.loads(source.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{where}: malformed TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{where}: cannot read suite file: {exc}") from None
    return parse_suite(
        data,
        name=source.name.removesuffix(".toml"),
        where=where,
        folder=path.absolute().parent if source is path else None,
        source=str(path.absolute() if source is path else source),
    )


def parse_suite(
    data: dict[str, Any],
    *,
    name: str,
    where: str,
    folder: Path | None = None,
    source: str = "",
) -> SuiteSpec:
    """A suite from its TOML table; ``folder`` (the suite file's) anchors ``python_path``;
    ``source`` names the file it was read from."""
    unknown = set(data) - {"name", "description", "defaults", "entries", "python_path", "cluster"}
    if unknown:
        raise SpecError(
            f"{where}: unknown top-level key(s) {sorted(unknown)}; expected "
            "description, defaults, [[entries]], python_path, [cluster]"
        )
    cluster = data.get("cluster", {})
    if not isinstance(cluster, dict):
        raise SpecError(f"{where}: [cluster] must be a table (partition, account, time_min, …)")
    python_path = data.get("python_path", [])
    if isinstance(python_path, str):
        python_path = [python_path]
    if not isinstance(python_path, list) or not all(isinstance(p, str) for p in python_path):
        raise SpecError(f"{where}: python_path must be a folder or a list of folders")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SpecError(f"{where}: [defaults] must be a table")
    entries_raw = data.get("entries", [])
    if not isinstance(entries_raw, list) or not entries_raw:
        raise SpecError(f"{where}: a suite needs at least one [[entries]] table with a workload")
    entries = []
    for i, entry in enumerate(entries_raw):
        if not isinstance(entry, dict) or "workload" not in entry:
            raise SpecError(f"{where}: entry {i + 1} has no 'workload'")
        extra = set(entry) - {"workload", "set", *SUITE_DEVICES}
        if extra:
            raise SpecError(
                f"{where}: entry {i + 1}: unknown key(s) {sorted(extra)} (put settings under "
                f"'set', or under {' or '.join(SUITE_DEVICES)} for one device)"
            )
        overrides = entry.get("set", {})
        if not isinstance(overrides, dict):
            raise SpecError(f"{where}: entry {i + 1}: 'set' must be a table")
        entries.append(
            SuiteEntry(
                workload=str(entry["workload"]),
                overrides=coerce_all(overrides, f"{where}: entry {i + 1}"),
                on_device=_device_tables(entry, f"{where}: entry {i + 1}"),
            )
        )
    return SuiteSpec(
        name=str(data.get("name", name)),
        description=str(data.get("description", "")),
        defaults=coerce_all(
            {k: v for k, v in defaults.items() if k not in SUITE_DEVICES}, f"{where}: [defaults]"
        ),
        entries=tuple(entries),
        on_device=_device_tables(defaults, f"{where}: [defaults]"),
        python_path=tuple(str((folder or Path.cwd()) / p) for p in python_path),
        cluster=dict(cluster),
        source=source,
    )


def _device_tables(table: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """The ``cpu`` / ``cuda`` sub-tables of ``table``, coerced, by device."""
    out = {}
    for device in SUITE_DEVICES:
        if device not in table:
            continue
        sub = table[device]
        if not isinstance(sub, dict):
            raise SpecError(f"{where}: '{device}' must be a table of settings for that device")
        if "device" in flatten(sub):
            raise SpecError(f"{where}: '{device}' cannot set 'device' (it is chosen by it)")
        out[device] = coerce_all(sub, f"{where}: {device}")
    return out
