"""Run specifications: the settings of one benchmark configuration, and suites of them.

A RunSpec is fully resolved (every setting has a value) and validated. Settings are addressed
by dotted keys (``model.size``, ``data.lengths``, ``train.steps``); the same keys are used in
suite files, in ``--set key=value`` and in the stored config JSON.

Precedence, lowest first: the defaults below < the workload's base settings < the suite's
``[defaults]`` < the suite entry's ``set`` < command-line options (``--repeats``, ``--set`` …).
A value given as a list (in TOML, or ``--set key=a,b``) sweeps that setting.

A user workload (``mypkg.bench:workload``, `greenbench.user`) has the settings below that are not
about greenbench's own models and data (`BUILT_IN_ONLY`), plus its own ``user.*`` settings, typed
by the defaults it declares. A layer several workloads share (a suite's ``[defaults]``, the
command line of a suite run) gives each workload the settings it has, and naming a setting none
of them has is an error; a workload's own layers may name only its settings.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomllib

from greenbench.errors import SpecError
from greenbench.vocabulary import DEGREES, Layout, RunSpec, is_user_workload, resolve_layout

if TYPE_CHECKING:
    from greenbench.workload import Workload

#: every setting, its default and its type. ``"auto"`` means "decided when the spec is
#: resolved": nproc and the layout's degrees from each other (greenbench.vocabulary.layout),
#: device, precision, the scan kernel and CPU quotas by the launcher on the machine it runs on.
DEFAULTS: dict[str, Any] = {
    "strategy": "single",  # single | ddp | fsdp | odc | hybrid | auto (from `layout`)
    "nproc": "auto",  # ranks per node; auto: the layout's ranks / nnodes (1 without a layout)
    "nnodes": 1,
    "layout": "auto",  # the degrees at once, e.g. tp2-dps2 (the others 1); sets layout.*
    "layout.dp_replicate": "auto",  # data-parallel replicas (ddp fills it)
    "layout.dp_shard": "auto",  # data-parallel shards (fsdp fills it)
    "layout.tp": "auto",  # tensor-parallel degree (auto: 1)
    "layout.pp": "auto",  # pipeline stages (auto: 1)
    "layout.cp": "auto",  # context-parallel degree (auto: 1)
    "device": "auto",  # auto | cpu | cuda
    "precision": "auto",  # auto (fp32 on cpu, bf16 on cuda) | fp32 | bf16
    "repeats": 3,
    "seed": 0,
    "timeout_s": 900.0,
    "model.family": "transformer",
    "model.size": "tiny",
    # the scan kernel of a state-space family, each family checks its own choices:
    # auto | native | torch | triton | mamba-ssm | fla
    "model.scan": "auto",
    "data.lengths": "fixed",
    "data.seq_len": 256,
    "data.global_batch": 8,  # sequences per optimizer step, over all ranks
    "data.micro_batch": 4,  # packed rows per microbatch
    "data.scale": 1.0 / 32.0,  # length scale for post-training distributions on CPU
    "data.cost_model": "linear",
    "data.balance": "auto",  # auto (the strategy's own: balanced-cost for odc) | same-count | …
    "train.steps": 3,  # minimum measured steps per repeat
    "train.max_steps": 200,  # upper bound when a window is lengthened to min_window_s
    "train.warmup_steps": 2,
    "train.lr": 1e-3,
    "train.pp_schedule": "1f1b",  # pipeline schedule when layout.pp > 1: 1f1b | gpipe
    # torch.compile of each block: auto (on for the Transformer on CUDA under single, ddp or
    # fsdp; off elsewhere) | on | off
    "train.compile": "auto",
    # liger-kernel's fused norm, RoPE, SwiGLU and linear cross-entropy for the Transformer:
    # auto (on where it is installed, on CUDA under single, ddp or fsdp) | on | off
    "model.liger": "auto",
    "train.min_window_s": 1.0,
    "energy.source": "auto",  # auto | nvml | zeus | rapl | estimate
    "energy.region": "world",  # ISO-3 country code or cloud region for carbon intensity
    "energy.idle_s": 1.0,  # idle-power sampling window before the suite (0 disables)
    # the node's own power meter, stored beside the run's devices as energy_node_j: auto (IPMI
    # DCMI where ipmitool answers, Redfish where energy.redfish_url is set) | off | ipmi | redfish
    "energy.node": "auto",
    # a Redfish Power or EnvironmentMetrics resource of this node's BMC, e.g.
    # https://bmc/redfish/v1/Chassis/1/EnvironmentMetrics (credentials: $GREENBENCH_REDFISH_USER,
    # $GREENBENCH_REDFISH_PASSWORD, never stored)
    "energy.redfish_url": "",
    "energy.node_poll_s": 1.0,  # seconds between node meter readings
    # GPU power limit, in watts or as a fraction of the default limit (at most one; 0: the
    # device's own limit, untouched); set through NVML as root or through zeusd before the
    # warm-up, always restored. The watts applied are part of the identity.
    "gpu.power_limit_w": 0.0,
    "gpu.power_limit_frac": 0.0,
    # CPU ranks stand in for GPUs of this type (h100, a100, …; "": off) whose NVML is
    # greenbench's power model: the power-limit path without a GPU, its energy labelled emulated
    "emulate.gpu": "",
    # How a shared CPU is made to behave like one device per rank; part of the identity.
    "emulate.rank_cpu_quota": "auto",  # auto (on when ranks outnumber cores) | on | off
    # SkipPipe (strategy=skippipe): nodes per stage (data nodes first), the share of the other
    # stages each microbatch skips, the paths' scheduler, a node that stops serving mid-run
    "skippipe.mode": "real",  # real | simulate (the discrete-event simulator, labelled)
    # the simulated network: local (the run's own nodes on one host, emulate.link_* links) |
    # gcp12 (SkipPipe's published 20 nodes over 12 GCP regions; skippipe.stages=5-3-3-3-3-3)
    "skippipe.network": "local",
    "skippipe.stages": "1-2-1",
    "skippipe.skip": 0.5,
    "skippipe.schedule": "skippipe",  # skippipe | random | full (every stage: GPipe order)
    "skippipe.fail_node": -1,  # this node stops serving from step skippipe.fail_step
    "skippipe.fail_step": 0,
    # Heterogeneity emulated for skippipe: link delay and slow nodes (part of the identity)
    "emulate.link_latency_ms": 0.0,
    "emulate.link_bandwidth_gbps": 0.0,  # 0: no bandwidth limit
    "emulate.slow_nodes": "",  # ranks that compute emulate.slowdown times as long: "2", "1-3"
    "emulate.slowdown": 1.0,
    # Instrumentation for testing greenbench itself; excluded from the configuration identity.
    "debug.slowdown_s": 0.0,  # extra compute (seconds) added to every training step
    "debug.fail_rank": -1,  # this rank raises at the first measured step
    "debug.hang_rank": -1,  # this rank sleeps forever at the first measured step
    "debug.kill_rank": -1,  # this rank SIGKILLs itself at the first measured step
    "debug.oom_rank": -1,  # this rank makes an allocation the machine cannot satisfy
    "debug.abort_at_exit_rank": -1,  # this rank aborts (SIGABRT) after the results are written
    "debug.fault_microbatch": 0,  # the microbatch of the first measured step the faults fire at
}


#: settings that take an integer or "auto" (resolved before a run)
AUTO_INTS = ("nproc", *(f"layout.{d}" for d in DEGREES))

CHOICES: dict[str, tuple[str, ...]] = {
    "device": ("auto", "cpu", "cuda"),
    "model.scan": ("auto", "native", "torch", "triton", "mamba-ssm", "fla"),
    "emulate.rank_cpu_quota": ("auto", "on", "off"),
    "precision": ("auto", "fp32", "bf16"),
    "data.balance": ("auto", "same-count", "sampler", "balanced-cost"),
    "train.pp_schedule": ("1f1b", "gpipe"),
    "train.compile": ("auto", "on", "off"),
    "model.liger": ("auto", "on", "off"),
    "skippipe.mode": ("real", "simulate"),
    "skippipe.network": ("local", "gcp12"),
    "skippipe.schedule": ("skippipe", "random", "full"),
    "energy.source": ("auto", "nvml", "zeus", "rapl", "estimate"),
    "energy.node": ("auto", "off", "ipmi", "redfish"),
}

MAX_SEED = 2**63 - 1
MAX_IDLE_S = 60.0

POSITIVE = (
    "nproc",
    "nnodes",
    "repeats",
    "data.seq_len",
    "data.global_batch",
    "data.micro_batch",
    "data.scale",
    "train.steps",
    "train.max_steps",
    "timeout_s",
    "energy.node_poll_s",
)
NON_NEGATIVE = (
    "seed",
    "train.warmup_steps",
    "train.lr",
    "train.min_window_s",
    "energy.idle_s",
    "debug.slowdown_s",
    "debug.fault_microbatch",
    "skippipe.fail_step",
    "emulate.link_latency_ms",
    "emulate.link_bandwidth_gbps",
    "gpu.power_limit_w",
    "gpu.power_limit_frac",
)


#: settings of greenbench's own models, data and schedules (prefixes and keys), which a user
#: workload does not have: its model, batches and their settings are its own
BUILT_IN_ONLY = (
    "model.",
    "data.",
    "skippipe.",
    "emulate.link_",
    "emulate.slow",
    "train.pp_schedule",
)
#: the prefix of a user workload's own settings (`greenbench.user.contract.USER_PREFIX`)
USER_PREFIX = "user."


def settings_table(workload: Workload) -> dict[str, Any]:
    """Every setting ``workload`` has, with its default: `DEFAULTS` for greenbench's own; for a
    user workload those not in `BUILT_IN_ONLY`, and its own ``user.*`` settings."""
    if workload.user is None:
        return DEFAULTS
    common = {k: v for k, v in DEFAULTS.items() if not k.startswith(BUILT_IN_ONLY)}
    return common | workload.user.workload.user_settings()


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
    check_key(key, table)
    default = table[key]
    if isinstance(value, list):
        if not value:
            raise SpecError(f"setting {key!r} sweeps no values (an empty list)")
        if any(isinstance(v, (list, dict)) for v in value):
            raise SpecError(f"setting {key!r}: a sweep is a flat list of values, got {value!r}")
        return [coerce(key, v, table) for v in value]
    if isinstance(value, dict):
        raise SpecError(f"setting {key!r} expects a value, got a table {value!r}")
    if key in AUTO_INTS:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        try:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        except (TypeError, ValueError, OverflowError):
            raise SpecError(f"setting {key!r} expects an int or 'auto', got {value!r}") from None
    kind = type(default)
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


def check_key(key: str, table: dict[str, Any] | None = None) -> None:
    table = DEFAULTS if table is None else table
    if key not in table:
        close = difflib.get_close_matches(key, table, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(f"unknown setting {key!r}{hint}; `greenbench list settings` shows them")


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


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"size": "tiny"}}`` → ``{"model.size": "tiny"}`` (dotted keys pass through)."""
    flat: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


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
    """Every value on its own: choices, registries, presets, signs. SpecError on the first.
    (A user workload's settings lack those of `BUILT_IN_ONLY`: only the present are checked.)"""
    from greenbench.data import COST_MODELS, LENGTH_DISTRIBUTIONS
    from greenbench.energy.carbon import carbon_intensity_g_per_kwh
    from greenbench.models import FAMILIES
    from greenbench.strategies import STRATEGIES

    for key, choices in CHOICES.items():
        if key in s and s[key] not in choices:
            raise SpecError(f"{key}={s[key]!r} is not one of {', '.join(choices)}")
    named = {
        "strategy": STRATEGIES,
        "model.family": FAMILIES,
        "data.lengths": LENGTH_DISTRIBUTIONS,
        "data.cost_model": COST_MODELS,
    }
    for key, registry in named.items():
        if key in s and s[key] not in registry:
            raise SpecError(f"{key}={s[key]!r} is not one of {', '.join(sorted(registry))}")
    sizes = FAMILIES[s["model.family"]].presets if "model.family" in s else {}
    if "model.family" in s and s["model.size"] not in sizes:
        raise SpecError(
            f"model.size={s['model.size']!r} is not a {s['model.family']} preset "
            f"({', '.join(sizes)})"
        )
    for key in POSITIVE:
        if key in s and s[key] != "auto" and not s[key] > 0:
            raise SpecError(f"{key} must be > 0, got {s[key]!r}")
    for key in NON_NEGATIVE:
        if key in s and not s[key] >= 0:
            raise SpecError(f"{key} must be >= 0, got {s[key]!r}")
    for key in AUTO_INTS:
        if s[key] != "auto" and not s[key] >= 1:
            raise SpecError(f"{key} must be >= 1 or 'auto', got {s[key]!r}")
    if s["train.max_steps"] < s["train.steps"]:
        raise SpecError("train.max_steps must be >= train.steps")
    if s["energy.idle_s"] > MAX_IDLE_S:
        raise SpecError(
            f"energy.idle_s={s['energy.idle_s']:g} is longer than {MAX_IDLE_S:g} s: a longer "
            "idle window only delays the run (its power is averaged over the window)"
        )
    if s["seed"] > MAX_SEED:
        raise SpecError(f"seed must be at most 2**63 - 1 (a 64-bit integer), got {s['seed']}")
    carbon_intensity_g_per_kwh(s["energy.region"])  # SpecError for an unknown region
    check_power_settings(s)


def check_power_settings(s: dict[str, Any]) -> None:
    """The GPU power limit, the emulated GPU and the node meter, against each other and the
    device (a device still ``auto`` is checked again by the launcher once it is known)."""
    from greenbench.hardware.gpus import DEVICE_TYPES

    watts, fraction = s.get("gpu.power_limit_w", 0.0), s.get("gpu.power_limit_frac", 0.0)
    if watts > 0 and fraction > 0:
        raise SpecError(
            "set at most one of gpu.power_limit_w (watts) and gpu.power_limit_frac (a fraction "
            "of the default limit)"
        )
    gpu = s.get("emulate.gpu", "")
    if gpu:
        if gpu not in DEVICE_TYPES:
            raise SpecError(
                f"emulate.gpu={gpu!r} is not a GPU type greenbench models "
                f"({', '.join(sorted(DEVICE_TYPES))})"
            )
        if s.get("device") == "cuda":
            raise SpecError("emulate.gpu stands CPU ranks in for GPUs: it runs on device cpu")
        if s.get("energy.source", "auto") != "auto":
            raise SpecError(
                "an emulated GPU's energy comes from its power model: leave energy.source auto"
            )
    elif (watts > 0 or fraction > 0) and s.get("device") == "cpu":
        raise SpecError(
            "a GPU power limit (gpu.power_limit_w or gpu.power_limit_frac) needs GPUs, and this "
            "run's device is cpu: use --device cuda, or emulate.gpu=h100 to try it on an "
            "emulated GPU"
        )
    url = s.get("energy.redfish_url", "")
    if url and not url.startswith(("http://", "https://")):
        raise SpecError(f"energy.redfish_url must be an http:// or https:// URL, got {url!r}")
    if s.get("energy.node") == "redfish" and not url:
        raise SpecError(
            "energy.node=redfish needs energy.redfish_url (the BMC's Power or "
            "EnvironmentMetrics resource)"
        )


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
    if any(s.get(key) == "auto" for key in (*AUTO_INTS, "data.balance")):
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
