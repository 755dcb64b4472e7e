"""Finding a user's workload: a Python entry point (``mypkg.bench:workload``) or a name a package
registered under the ``greenbench.workloads`` entry-point group, loaded and checked once.

Whatever goes wrong is the user's input, so it is one `WorkloadLoadError` (exit 2) whose message
names the entry point and the problem: a module that does not import, an attribute it lacks, an
entry point that raises, or one that returns something other than a `Workload`. A module or an
entry point that calls ``sys.exit`` is one too: its exit status is never passed on as
greenbench's (3 would tell CI "regression"); Ctrl-C still stops greenbench. Nothing is written
before a workload has loaded.

The module is imported as ``python -m`` would (the current directory on ``sys.path``), so a
workload in the repository one runs from needs no installation; the worker processes, started
with ``python -m`` in the same directory, import the same module. The package that provides the
module, its version and the git commit of its source are recorded with every run (not part of
its identity: base and head of a pull request stay the same configuration).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from greenbench.errors import SpecError
from greenbench.user.contract import (
    SETTING_TYPES,
    USER_PREFIX,
    USER_STRATEGIES,
    Workload,
    positive_flops,
)

#: the entry-point group packages register their workloads under
ENTRY_POINT_GROUP = "greenbench.workloads"

_REF = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")


class WorkloadLoadError(SpecError):
    """A user workload's entry point cannot be imported, raises, or returns the wrong type."""


@dataclass(frozen=True, slots=True)
class LoadedWorkload:
    """A user workload, where it came from, and (`provenance`) the package version that
    provided it and the commit of its source, looked up when first asked: the launcher stores
    them with each run, a rank needs neither (scanning the installed packages and asking git
    cost it seconds of start-up)."""

    ref: str  # "module:attribute", the canonical name runs are stored under
    workload: Workload
    module_name: str = ""
    module_file: str | None = None
    registered_as: str | None = None  # its name in the entry-point group, if registered

    def provenance(self) -> dict[str, Any]:
        """What is stored with each run (``runs.versions``), beside greenbench's own versions."""
        package, version = _distribution(self.module_name)
        return {
            "entry_point": self.ref,
            "name": self.workload.name,
            "package": package,
            "version": version,
            "git_sha": _git_sha(self.module_file),
        }


def is_entry_point(text: str) -> bool:
    """Whether a workload name is a ``module:attribute`` entry point (built-in names have no
    colon)."""
    return ":" in text


def registered() -> dict[str, metadata.EntryPoint]:
    """The workloads installed packages register under `ENTRY_POINT_GROUP`, by name."""
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def add_python_path(paths: Iterable[str | Path]) -> None:
    """Put directories in front of ``sys.path`` here and of ``PYTHONPATH`` for the workers this
    process starts (a suite's ``python_path``)."""
    for path in reversed([str(Path(p).resolve()) for p in paths]):
        if path not in sys.path:
            sys.path.insert(0, path)
        parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if path not in parts:
            os.environ["PYTHONPATH"] = os.pathsep.join([path, *parts])


def load(name: str) -> LoadedWorkload:
    """The user workload ``name`` names: a registered name or a ``module:attribute``."""
    if not is_entry_point(name):
        found = registered()
        if name not in found:
            raise WorkloadLoadError(f"no workload is registered as {name!r}")
        return _load(found[name].value.strip(), name)
    return _load(name.strip(), None)


@functools.cache
def _load(ref: str, registered_as: str | None) -> LoadedWorkload:
    where = f"workload entry point {ref!r}" + (
        f" (registered as {registered_as!r})" if registered_as else ""
    )
    if not _REF.fullmatch(ref):
        raise WorkloadLoadError(f"{where}: write it as module.path:attribute")
    module_name, attr = ref.split(":", 1)
    module = _import(module_name, where)
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            close = difflib.get_close_matches(part, dir(target), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise WorkloadLoadError(f"{where}: module {module_name!r} has no {attr!r}{hint}")
        target = getattr(target, part)
    if not isinstance(target, Workload):
        if not callable(target):
            raise WorkloadLoadError(
                f"{where} is a {type(target).__name__}, not a greenbench.Workload "
                "(or a function returning one)"
            )
        try:
            target = target()
        except SystemExit as exc:
            raise WorkloadLoadError(f"{where} called sys.exit({exc.code!r})") from None
        except Exception as exc:
            raise WorkloadLoadError(f"{where} raised {type(exc).__name__}: {exc}") from None
        if not isinstance(target, Workload):
            raise WorkloadLoadError(
                f"{where} returned {type(target).__name__}, not a greenbench.Workload"
            )
    check(target, where)
    return LoadedWorkload(
        ref=ref,
        workload=target,
        module_name=module_name,
        module_file=getattr(module, "__file__", None),
        registered_as=registered_as,
    )


def _import(module_name: str, where: str) -> Any:
    cwd = os.getcwd()
    if cwd not in sys.path:  # as `python -m` (and so the workers) would see it
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(f"{missing}."):
            raise WorkloadLoadError(
                f"{where}: cannot import module {module_name!r} (no module named {missing!r}; "
                "install its package, run from the folder that holds it, or name its folder "
                "in PYTHONPATH or the suite's python_path)"
            ) from None
        raise WorkloadLoadError(
            f"{where}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    except SystemExit as exc:  # its exit status is not greenbench's (3 would read "regression")
        raise WorkloadLoadError(
            f"{where}: importing module {module_name!r} called sys.exit({exc.code!r})"
        ) from None
    except Exception as exc:
        raise WorkloadLoadError(
            f"{where}: importing module {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None


def check(wl: Workload, where: str) -> None:
    """WorkloadLoadError naming the first field of ``wl`` of the wrong type or value."""
    for name in ("build_model", "batch", "loss"):
        if not callable(getattr(wl, name)):
            raise WorkloadLoadError(f"{where}: Workload.{name} must be a function")
    if not isinstance(wl.name, str) or not wl.name.strip():
        raise WorkloadLoadError(f"{where}: Workload.name must be a non-empty string")
    fpt = wl.flops_per_token
    if fpt is not None and not callable(fpt) and not positive_flops(fpt):
        raise WorkloadLoadError(
            f"{where}: Workload.flops_per_token must be a finite positive number, a function "
            f"of the settings, or None (counted), got {fpt!r}"
        )
    strategies = wl.strategies
    if isinstance(strategies, str) or not strategies:
        raise WorkloadLoadError(f"{where}: Workload.strategies must be a tuple of names")
    unknown = [s for s in strategies if s not in USER_STRATEGIES]
    if unknown:
        raise WorkloadLoadError(
            f"{where}: Workload.strategies names {unknown}; a user workload runs under "
            f"{', '.join(USER_STRATEGIES)}"
        )
    for key, value in wl.settings.items():
        bare = key[len(USER_PREFIX) :] if key.startswith(USER_PREFIX) else key
        if not re.fullmatch(r"[A-Za-z_][\w.-]*", bare):
            raise WorkloadLoadError(f"{where}: setting name {key!r} is not a plain name")
        if type(value) not in SETTING_TYPES:
            raise WorkloadLoadError(
                f"{where}: setting {key!r} has a default of type {type(value).__name__}; "
                "defaults are bool, int, float or str"
            )
    if wl.blocks is not None and not callable(wl.blocks):
        raise WorkloadLoadError(f"{where}: Workload.blocks must be a function or None")
    if isinstance(wl.seq_len, bool) or not isinstance(wl.seq_len, int) or wl.seq_len < 0:
        raise WorkloadLoadError(f"{where}: Workload.seq_len must be an integer >= 0")


@functools.cache
def _distribution(module_name: str) -> tuple[str | None, str | None]:
    """(distribution, version) that provides ``module_name``'s top-level package, if installed."""
    top = module_name.split(".", 1)[0]
    names = metadata.packages_distributions().get(top) or []
    for dist in names:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None, None


@functools.cache
def _git_sha(module_file: str | None) -> str | None:
    """The commit of the git checkout holding ``module_file`` (None outside one)."""
    if not module_file:
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(module_file).parent), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None
