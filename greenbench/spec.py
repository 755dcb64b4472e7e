"""Run specifications: the settings of one benchmark configuration, and suites of them.

A RunSpec is fully resolved (every setting has a value) and validated. Settings are addressed
by dotted keys (``model.size``, ``data.lengths``, ``train.steps``); the same keys are used in
suite files, in ``--set key=value`` and in the stored config JSON.

Precedence, lowest first: the defaults below < the workload's base settings < the suite's
``[defaults]`` < the suite entry's ``set`` < command-line options (``--repeats``, ``--set`` …).
A value given as a list (in TOML, or ``--set key=a,b``) sweeps that setting.

A user workload (``mypkg.bench:workload``, `greenbench.user`) has the settings below that are not
about greenbench's own models and data (each field says), plus its own ``user.*`` settings, typed
by the defaults it declares. A layer several workloads share (a suite's ``[defaults]``, the
command line of a suite run) gives each workload the settings it has, and naming a setting none
of them has is an error; a workload's own layers may name only its settings.
"""

from __future__ import annotations

import difflib
import itertools
import re
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomllib

from greenbench.config import USER_PREFIX, flatten
from greenbench.errors import SpecError
from greenbench.settings import DEFAULTS, SCHEMA
from greenbench.settings.runspec import RunSpec
from greenbench.vocabulary import DEGREES, Layout, is_user_workload, resolve_layout

if TYPE_CHECKING:
    from greenbench.workload import Workload

#: settings that take an integer or "auto", made concrete when a spec is resolved
RESOLVED = ("nproc", *(f"layout.{d}" for d in DEGREES))


def settings_table(workload: Workload) -> dict[str, Any]:
    """Every setting ``workload`` has, with its default: `DEFAULTS` for greenbench's own; for a
    user workload those not about greenbench's own models and data, and its own ``user.*``
    settings."""
    if workload.user is None:
        return DEFAULTS
    return SCHEMA.defaults(built_in=False) | workload.user.workload.user_settings()


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


# --------------------------------------------------------------------------- parsing values


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


def fit_layer(
    layer: dict[str, Any], workload: Workload, table: dict[str, Any], *, shared: bool = False
) -> dict[str, Any]:
    """``layer``'s settings for ``workload`` (its ``user.*`` values converted by their defaults).

    A setting the workload does not have is an error, or, in a ``shared`` layer (a suite's
    defaults, a suite run's command line), left out for this workload."""
    out = {}
    for key, value in layer.items():
        if key not in table:
            if shared:
                continue
            raise SpecError(f"workload {workload.name}: {not_its_setting(key, workload, table)}")
        if not (key.startswith(USER_PREFIX) or workload.user is not None):
            out[key] = value  # greenbench's own, coerced where it was read
            continue
        try:
            out[key] = coerce(key, value, table)
        except SpecError as exc:
            raise SpecError(f"workload {workload.name}: {exc}") from None
    return out


def not_its_setting(key: str, workload: Workload, table: dict[str, Any]) -> str:
    """Why ``key`` is not a setting of ``workload``, with the ones it has instead."""
    own = sorted(k for k in table if k.startswith(USER_PREFIX))
    if workload.user is not None and key in DEFAULTS:
        return (
            f"setting {key!r} is about greenbench's own models and data, which a user workload "
            f"does not use (its own settings: {', '.join(own) or 'none'})"
        )
    if key.startswith(USER_PREFIX):
        close = difflib.get_close_matches(key, own, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        has = f"its own settings: {', '.join(own)}" if own else "it declares no user settings"
        return f"unknown setting {key!r}{hint}; {has}"
    check_key(key, table)  # raises, with the closest match
    return f"unknown setting {key!r}"


def coerce_all(table: dict[str, Any], where: str) -> dict[str, Any]:
    out = {}
    for k, v in flatten(table).items():
        try:
            out[k] = coerce(k, v)
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
    return out


# --------------------------------------------------------------------------- suites


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


# --------------------------------------------------------------------------- expansion


def expand(
    workload: str,
    layers: list[dict[str, Any]],
    *,
    suite: str | None = None,
    label: str | None = None,
) -> list[RunSpec]:
    """Expand a workload's sweep with override layers (lowest precedence first) into RunSpecs,
    each resolved (layout and nproc) and validated."""
    from greenbench.workloads import get_workload

    wl = get_workload(workload)
    table = settings_table(wl)
    merged: dict[str, Any] = dict(table)
    for layer in (wl.base, wl.sweep, *layers):
        merged.update(fit_layer(layer, wl, table))
    sweep_keys = [k for k, v in merged.items() if isinstance(v, list)]
    specs = []
    for combo in itertools.product(*(merged[k] for k in sweep_keys)):
        settings = dict(merged)
        settings.update(zip(sweep_keys, combo, strict=True))
        spec = RunSpec(workload=wl.name, settings=resolve(settings), suite=suite, label=label)
        validate(spec)
        specs.append(spec)
    return specs


def expand_suite(
    suite: SuiteSpec, cli: dict[str, Any], *, label: str | None, machine_device: str | None = None
) -> list[RunSpec]:
    """Every configuration of ``suite`` with the command line's settings on top.

    An entry's configurations run on the device its settings name, or on ``machine_device``
    where they say ``auto`` (default: cuda when torch sees a GPU, else cpu); that device's
    tables of the suite (``[defaults.cuda]``, ``[entries.cuda]``) apply above the suite's
    defaults and the entry's ``set`` respectively, below the command line."""
    from greenbench.workloads import get_workload

    if suite.python_path:
        from greenbench.user.entry import add_python_path

        add_python_path(suite.python_path)
    workloads = [get_workload(entry.workload) for entry in suite.entries]
    tables = [settings_table(wl) for wl in workloads]
    shared = [suite.defaults, *suite.on_device.values(), cli]
    for key in sorted({k for layer in shared for k in layer}):
        if not any(key in table for table in tables):
            wl = workloads[0]
            raise SpecError(f"suite {suite.name}: {not_its_setting(key, wl, tables[0])}")
    specs: list[RunSpec] = []
    for entry, wl, table in zip(suite.entries, workloads, tables, strict=True):
        merged = {"device": "auto"} | dict(wl.base)
        for layer in (suite.defaults, entry.overrides, cli):
            merged |= fit_layer(layer, wl, table, shared=layer is not entry.overrides)
        device = merged["device"]
        if device == "auto":
            device = machine_device or default_device()
        elif not isinstance(device, str):  # a sweep over devices: no device's own tables
            device = None
        layers = [
            fit_layer(suite.defaults, wl, table, shared=True),
            fit_layer(suite.on_device.get(device, {}), wl, table, shared=True),
            entry.overrides,
            entry.on_device.get(device, {}),
            fit_layer(cli, wl, table, shared=True),
        ]
        specs += expand(entry.workload, layers, suite=suite.name, label=label)
    return specs


def default_device() -> str:
    """The device ``auto`` becomes on this machine: cuda when torch sees a GPU, else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_values(s: dict[str, Any]) -> None:
    """Every value on its own (choices, registries, bounds), then each section's checks of its
    settings together (presets, the power limit against the device, …): SpecError on the first.
    (A user workload's settings lack those about greenbench's own models and data: only the
    present are checked.)"""
    SCHEMA.check(s)
    SCHEMA.check_sections(s)


def check_degrees_fit_model(s: dict[str, Any], degrees: dict[str, int]) -> None:
    """Each given degree against the model and the data: tp divides what the family splits
    (attention heads, Mamba's inner channels), pp is at most the layers, cp divides the
    sequence and the family has a context-parallel form (the card's `layout_fits`). (A user
    workload has no model family: its layouts are data-parallel only.)"""
    from greenbench.models import family

    if "model.family" not in s:
        return
    misfit = family(s["model.family"]).layout_fits(
        s["model.size"],
        degrees.get("tp", 1),
        degrees.get("pp", 1),
        degrees.get("cp", 1),
        s["data.seq_len"],
    )
    if misfit:
        raise SpecError(misfit)


def apply_layout_text(s: dict[str, Any]) -> str | None:
    """``layout`` (e.g. ``tp2-dps2``) into the ``layout.*`` degrees (in place), and
    ``strategy=auto`` into the strategy that applies them: ``single`` for one rank, ``ddp``
    for replicas alone, ``fsdp`` for shards alone, ``hybrid`` for anything else.

    A degree also set directly to another value keeps it, and the clash is returned for
    ``resolve`` to refuse once the degrees are checked against the model: a degree no layout
    could take (more pipeline stages than layers) is the problem to name, not its clash with a
    swept layout."""
    clash = None
    if s["layout"] != "auto":
        layout = Layout.from_short(str(s["layout"]))
        for name, value in layout.degrees().items():
            given = s[f"layout.{name}"]
            if given != "auto" and given != value:
                clash = clash or (
                    f"layout={s['layout']} gives layout.{name}={value} but layout.{name}={given}"
                    " is set too (give the layout or its degrees, not both)"
                )
                continue
            s[f"layout.{name}"] = value
    if s["strategy"] == "auto":
        degrees = {d: s[f"layout.{d}"] for d in DEGREES if s[f"layout.{d}"] not in ("auto", 1)}
        if not degrees:
            s["strategy"] = "single"
        elif set(degrees) == {"dp_replicate"}:
            s["strategy"] = "ddp"
        elif set(degrees) == {"dp_shard"}:
            s["strategy"] = "fsdp"
        else:
            s["strategy"] = "hybrid"
    return clash


def resolve(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings with nproc and the layout's degrees made concrete (validated on the way)."""
    from greenbench.strategies import STRATEGIES

    s = dict(settings)
    clash = apply_layout_text(s)
    check_values(s)
    given = {d: s[f"layout.{d}"] for d in DEGREES if s[f"layout.{d}"] != "auto"}
    check_degrees_fit_model(s, given)
    if clash:
        raise SpecError(clash)
    cls = STRATEGIES[s["strategy"]]
    if s.get("data.balance") == "auto":
        s["data.balance"] = cls.balance
    world = None if s["nproc"] == "auto" else s["nproc"] * s["nnodes"]
    appliers = {d: [n for n, c in STRATEGIES.items() if d in c.applies] for d in DEGREES}
    layout = resolve_layout(
        given,
        world=world,
        strategy=s["strategy"],
        applies=cls.applies,
        fills=cls.fills,
        appliers=appliers,
    )
    if world is None:
        if layout.world % s["nnodes"]:
            raise SpecError(
                f"layout {layout.text} has {layout.world} ranks, which nnodes={s['nnodes']} "
                "cannot share equally"
            )
        s["nproc"] = layout.world // s["nnodes"]
    s.update({f"layout.{d}": v for d, v in layout.degrees().items()})
    return s


def validate(spec: RunSpec) -> None:
    """Check a resolved spec; raise SpecError naming the first problem."""
    from greenbench.strategies import STRATEGIES

    s = spec.settings
    check_values(s)
    if any(s.get(key) == "auto" for key in (*RESOLVED, "data.balance")):
        raise SpecError("validate needs a resolved spec (nproc, layout.*, data.balance concrete)")
    layout = spec.layout
    check_degrees_fit_model(s, layout.degrees())
    if layout.world != s["nproc"] * s["nnodes"]:
        raise SpecError(
            f"layout {layout.text} needs {layout.world} ranks but nproc×nnodes = "
            f"{s['nproc'] * s['nnodes']}"
        )
    if is_user_workload(spec.workload):
        check_user_run(spec)
    else:
        STRATEGIES[s["strategy"]].validate(s, layout)


def check_user_run(spec: RunSpec) -> None:
    """A user workload's run: a strategy the workload supports, and a warm-up step to count its
    FLOPs in when it does not give them."""
    from greenbench.workloads import get_workload

    wl = get_workload(spec.workload)
    own = wl.user.workload if wl.user is not None else None
    if own is None:
        return
    if spec["strategy"] not in own.strategies:
        raise SpecError(
            f"workload {spec.workload} runs under {', '.join(own.strategies)} (its "
            f"Workload.strategies), not strategy={spec['strategy']}"
        )
    if own.flops_per_token is None and spec["train.warmup_steps"] < 1:
        raise SpecError(
            f"workload {spec.workload} gives no flops_per_token, so they are counted over the "
            "first warm-up step: train.warmup_steps must be >= 1"
        )
