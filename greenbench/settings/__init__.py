"""greenbench's settings: the sections each owner declares, assembled into one `SCHEMA`.

The run's own sections (`greenbench.settings.run`) and those of the models, the data and the
meters are listed here once, and each strategy's own section comes from its card;
suite files, ``--set``, `greenbench list settings`, docs/settings.md, validation and each run's
identity all read them from `SCHEMA`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from greenbench.config import Config, Schema, setting_of
from greenbench.data.settings import DataSettings
from greenbench.energy.settings import EnergySettings, GpuSettings
from greenbench.models.settings import ModelSettings
from greenbench.settings.fault import CkptSettings, FaultSettings
from greenbench.settings.run import (
    DebugSettings,
    EmulateSettings,
    LayoutSettings,
    RunSettings,
    TrainSettings,
)
from greenbench.settings.runspec import RunSpec
from greenbench.settings.target import EvalSettings, TargetSettings
from greenbench.strategies import STRATEGIES
from greenbench.strategies.skippipe.settings import SkipPipeSettings
from greenbench.vocabulary import config_key

SCHEMA = Schema(
    (
        RunSettings,
        LayoutSettings,
        ModelSettings,
        DataSettings,
        TrainSettings,
        EnergySettings,
        GpuSettings,
        EmulateSettings,
        EvalSettings,
        TargetSettings,
        *(card.settings for card in STRATEGIES.values() if card.settings is not None),
        CkptSettings,
        FaultSettings,
        DebugSettings,
    )
)

#: every setting greenbench's own workloads have, with its default
DEFAULTS: dict[str, Any] = SCHEMA.defaults()


def config_of(spec: RunSpec) -> Config:
    """The typed view of ``spec``'s settings."""
    return SCHEMA.config(spec.settings)


def identity_of(settings: Mapping[str, Any], workload: str) -> dict[str, Any]:
    """The settings that define a configuration of ``workload``, plus the workload."""
    return SCHEMA.identity(settings, workload)


def spec_identity(spec: RunSpec) -> dict[str, Any]:
    """The settings that define ``spec``'s configuration, plus its workload."""
    return identity_of(spec.settings, spec.workload)


def spec_key(spec: RunSpec) -> str:
    """``spec``'s configuration key (`greenbench.vocabulary.config_key` of its identity)."""
    return config_key(spec_identity(spec))


#: the setting a seed group leaves out of a configuration's identity
SEED_KEY = setting_of(RunSettings, "seed").key


def seed_group_of(identity: Mapping[str, Any]) -> str:
    """The seed group of a configuration's ``identity`` (`identity_of`): the key of the identity
    without its seed, so that runs differing only in their seed share it and are pooled over
    seeds (each seed one sample), while ``config_key`` still tells them apart. Where
    ``data.chain_seed`` is -1 the seed also draws the data's chain, and with it its loss floor
    and a target stated as a share of the gap: the group's runs then differ in that too, as
    another seed's run does."""
    return config_key({k: v for k, v in identity.items() if k != SEED_KEY})


def spec_seed_group(spec: RunSpec) -> str:
    """``spec``'s seed group (`seed_group_of` of its identity)."""
    return seed_group_of(spec_identity(spec))


__all__ = [
    "DEFAULTS",
    "SCHEMA",
    "SEED_KEY",
    "Config",
    "DataSettings",
    "DebugSettings",
    "EmulateSettings",
    "EnergySettings",
    "EvalSettings",
    "GpuSettings",
    "LayoutSettings",
    "ModelSettings",
    "RunSettings",
    "RunSpec",
    "SkipPipeSettings",
    "TargetSettings",
    "TrainSettings",
    "config_of",
    "identity_of",
    "seed_group_of",
    "spec_identity",
    "spec_key",
    "spec_seed_group",
]
