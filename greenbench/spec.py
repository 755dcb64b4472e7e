"""Run specifications: the settings of one benchmark configuration, and the expansion of a
workload or a suite (`greenbench.suite`) into them.

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
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from greenbench.config import USER_PREFIX, setting_of
from greenbench.errors import SpecError
from greenbench.settings import DEFAULTS, SCHEMA, SEED_KEY, DataSettings, spec_key
from greenbench.settings.layout import DEGREE_KEYS, apply_layout_text, check_degrees_fit_model
from greenbench.settings.runspec import RunSpec
from greenbench.settings.written import check_key, coerce
from greenbench.strategies.skippipe.settings import SkipPipeSettings
from greenbench.vocabulary import DEGREES, is_user_workload, resolve_layout

if TYPE_CHECKING:
    from greenbench.suite import SuiteSpec
    from greenbench.workload import Workload


def settings_table(workload: Workload) -> dict[str, Any]:
    """Every setting ``workload`` has, with its default: `DEFAULTS` for greenbench's own; for a
    user workload those not about greenbench's own models and data, and its own ``user.*``
    settings."""
    if workload.user is None:
        return DEFAULTS
    return SCHEMA.defaults(built_in=False) | workload.user.workload.user_settings()


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


def with_seeds(specs: list[RunSpec], seeds: int) -> list[RunSpec]:
    """Every configuration of ``specs`` run with ``seeds`` seeds: its own seed, then seed + 1,
    … seed + seeds − 1, one after another (so progress names each seed's run); 1 keeps the
    specs as they are. Each seed's run is a configuration of its own (its ``config_key``), the
    runs of one configuration's seeds share a seed group (`greenbench.settings.seed_group_of`),
    which pools them over seeds. A configuration that an earlier one's seeds already hold (a
    swept seed) runs once."""
    if seeds < 1:
        raise SpecError(f"--seeds must be at least 1, got {seeds}")
    if seeds == 1:
        return list(specs)
    out: list[RunSpec] = []
    seen: set[tuple[str, str | None]] = set()
    for spec in specs:
        first = int(spec.settings.get(SEED_KEY, DEFAULTS[SEED_KEY]))
        for k in range(seeds):
            seeded = replace(spec, settings=spec.settings | {SEED_KEY: first + k})
            validate(seeded)  # the seed's own bound, first of all
            key = (spec_key(seeded), seeded.label)
            if key not in seen:
                seen.add(key)
                out.append(seeded)
    return out


def default_device() -> str:
    """The device ``auto`` becomes on this machine: cuda when torch sees a GPU, else cpu.
    Where torch is not imported yet and no GPU driver is installed, cpu without importing it
    (a second or two: `greenbench.hardware.machine.no_gpu_driver`)."""
    import sys

    from greenbench.hardware.machine import no_gpu_driver

    if "torch" not in sys.modules and no_gpu_driver():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_values(s: dict[str, Any]) -> None:
    """Every value on its own (choices, registries, bounds), then each section's checks of its
    settings together (presets, the power limit against the device, …): SpecError on the first.
    (A user workload's settings lack those about greenbench's own models and data: only the
    present are checked.)"""
    SCHEMA.check(s)
    SCHEMA.check_sections(s)


def resolve(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings with nproc and the layout's degrees made concrete (validated on the way)."""
    from greenbench.strategies import STRATEGIES

    s = dict(settings)
    clash = apply_layout_text(s)
    check_values(s)
    config = SCHEMA.config(s)
    given = {d: v for d, v in config.layout.degrees().items() if v != "auto"}
    check_degrees_fit_model(s, given)
    if clash:
        raise SpecError(clash)
    run = config.run
    card = STRATEGIES[run.strategy]
    if config.data is not None and config.data.balance == "auto":
        s[setting_of(DataSettings, "balance").key] = card.balance
    world = None if run.nproc == "auto" else run.nproc * run.nnodes
    appliers = {d: [n for n, c in STRATEGIES.items() if d in c.applies] for d in DEGREES}
    layout = resolve_layout(
        given,
        world=world,
        strategy=run.strategy,
        applies=card.applies,
        fills=card.fills,
        appliers=appliers,
    )
    if world is None:
        if layout.world % run.nnodes:
            raise SpecError(
                f"layout {layout.text} has {layout.world} ranks, which nnodes={run.nnodes} "
                "cannot share equally"
            )
        s["nproc"] = layout.world // run.nnodes
    s.update({DEGREE_KEYS[d]: v for d, v in layout.degrees().items()})
    return s


def validate(spec: RunSpec) -> None:
    """Check a resolved spec; raise SpecError naming the first problem."""
    from greenbench.strategies import STRATEGIES

    s = spec.settings
    check_values(s)
    config = spec.config
    run = config.run
    degrees = config.layout.degrees()
    balance = config.data.balance if config.data is not None else None
    if "auto" in (run.nproc, balance, *degrees.values()):
        raise SpecError("validate needs a resolved spec (nproc, layout.*, data.balance concrete)")
    layout = spec.layout
    check_degrees_fit_model(s, layout.degrees())
    if layout.world != run.nproc * run.nnodes:
        raise SpecError(
            f"layout {layout.text} needs {layout.world} ranks but nproc×nnodes = "
            f"{run.nproc * run.nnodes}"
        )
    if is_user_workload(spec.workload):
        check_user_run(spec)
    else:
        check_own_sections(s, run.strategy)
        STRATEGIES[run.strategy].validate(config, layout)


def check_own_sections(settings: dict[str, Any], strategy: str) -> None:
    """SpecError where a strategy's own section (``ddp.*``, ``fsdp.*``, ``odc.*``,
    ``skippipe.*``) is set away from its default on a run of another strategy: the setting would
    do nothing there, silently. Settings a section reads under another name (``emulate.*``)
    are shared and not judged here."""
    from greenbench.config import section_name, section_settings
    from greenbench.strategies import STRATEGIES

    for card in STRATEGIES.values():
        if card.name == strategy or card.settings is None:
            continue
        own = section_name(card.settings)
        for s in section_settings(card.settings):
            if s.key.startswith(f"{own}.") and s.key in settings and settings[s.key] != s.default:
                raise SpecError(
                    f"{s.key}={settings[s.key]} applies to strategy={card.name}, not "
                    f"strategy={strategy}"
                )
    link = [k for k in LINK_KEYS if settings.get(k)]
    if link and strategy not in ("ddp", "skippipe"):
        raise SpecError(
            f"{link[0]} emulates a link for strategy=ddp or skippipe, not strategy={strategy}"
        )


#: the emulated link's settings (`greenbench.distributed.link`)
LINK_KEYS = tuple(
    setting_of(SkipPipeSettings, name).key for name in ("link_latency_ms", "link_bandwidth_gbps")
)


def check_user_run(spec: RunSpec) -> None:
    """A user workload's run: a strategy the workload supports, and a warm-up step to count its
    FLOPs in when it does not give them."""
    from greenbench.workloads import get_workload

    wl = get_workload(spec.workload)
    own = wl.user.workload if wl.user is not None else None
    if own is None:
        return
    config = spec.config
    if config.run.strategy not in own.strategies:
        raise SpecError(
            f"workload {spec.workload} runs under {', '.join(own.strategies)} (its "
            f"Workload.strategies), not strategy={config.run.strategy}"
        )
    if own.flops_per_token is None and config.train.warmup_steps < 1:
        raise SpecError(
            f"workload {spec.workload} gives no flops_per_token, so they are counted over the "
            "first warm-up step: train.warmup_steps must be >= 1"
        )
