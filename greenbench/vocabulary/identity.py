"""What makes two runs "the same configuration", defined once.

A configuration's identity is its settings minus those that do not change *what* is measured
(how often, under which label or suite, with which timeout, test instrumentation). The seed is
part of it (another seed is another data stream and another initialisation), and so are the
settings the launcher resolves before a run starts (device, precision, the layout's degrees, the
kernel that ``model.scan: auto`` became, whether ranks ran under CPU quotas), so runs on
different kernels or arrangements are never pooled. ``config_key`` hashes it.

Two stored runs are comparable only when they also ran on the same kind of hardware and their
energy came from the same kind of source: `SAME_CONFIGURATION` lists those columns, and the
leaderboard, `compare`, reports and the dashboard all group by it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

#: settings that do not define *what* is measured, so not part of a configuration's identity
NON_IDENTITY_KEYS = frozenset(
    # ``layout`` only spells the ``layout.*`` degrees, which are part of the identity; the node
    # meter is read beside the run's devices and changes nothing of what they do
    {"repeats", "label", "suite", "timeout_s", "energy.idle_s", "layout"}
    | {"energy.node", "energy.redfish_url", "energy.node_poll_s"}
)


#: settings that are part of the identity only where they apply (so adding one left the
#: identity of every configuration it does not apply to unchanged)
def _skippipe(s: Mapping[str, Any]) -> bool:
    return s.get("strategy") == "skippipe"


def _simulated_skippipe(s: Mapping[str, Any]) -> bool:
    """A simulated SkipPipe run: only it has a network to choose (a real run's nodes are its
    ranks), so real runs' identities stay as they were."""
    return _skippipe(s) and s.get("skippipe.mode") == "simulate"


def _limit_fraction(s: Mapping[str, Any]) -> bool:
    """A power limit given as a fraction counts until the launcher turns it into the watts
    applied (``gpu.power_limit_w``), which then stand for it: the same watts are one
    configuration however they were asked for."""
    return (s.get("gpu.power_limit_frac") or 0) > 0 and not (s.get("gpu.power_limit_w") or 0) > 0


APPLIES_WHEN = {
    "train.pp_schedule": lambda s: s.get("layout.pp", 1) not in (1, "auto"),
    # compiled runs only: every run before the setting was eager, and keeps its identity
    "train.compile": lambda s: s.get("train.compile") == "on",
    "model.liger": lambda s: s.get("model.liger") == "on",
    # runs under a power limit, or on emulated GPUs, only: every other run keeps its identity
    "gpu.power_limit_w": lambda s: (s.get("gpu.power_limit_w") or 0) > 0,
    "gpu.power_limit_frac": _limit_fraction,
    "emulate.gpu": lambda s: bool(s.get("emulate.gpu")),
    "skippipe.network": _simulated_skippipe,
    **{
        key: _skippipe
        for key in (
            "skippipe.mode", "skippipe.stages", "skippipe.skip", "skippipe.schedule",
            "skippipe.fail_node", "skippipe.fail_step", "emulate.link_latency_ms",
            "emulate.link_bandwidth_gbps", "emulate.slow_nodes", "emulate.slowdown",
        )
    },
}  # fmt: skip
#: setting prefixes left out likewise (instrumentation for testing greenbench itself)
NON_IDENTITY_PREFIXES = ("debug.",)

#: stored `runs` columns that, together, make two results "the same configuration": the
#: settings' hash, the hardware the run had, and the kind of energy figure it produced
SAME_CONFIGURATION = (
    "config_key",
    "device_type",
    "nproc",
    "nnodes",
    "precision",
    "energy_source",
    "energy_measured",
)


def is_identity_key(key: str) -> bool:
    """Whether a setting is part of a configuration's identity."""
    return key not in NON_IDENTITY_KEYS and not key.startswith(NON_IDENTITY_PREFIXES)


def identity(settings: Mapping[str, Any], workload: str) -> dict[str, Any]:
    """The settings that define a configuration, plus its workload."""
    return {
        k: v
        for k, v in settings.items()
        if is_identity_key(k) and (k not in APPLIES_WHEN or APPLIES_WHEN[k](settings))
    } | {"workload": workload}


def config_key(config: Mapping[str, Any]) -> str:
    """Stable 16-hex-char hash of a configuration: what makes two runs "the same config".

    Canonical JSON (sorted keys, no whitespace) of ``config`` with the non-identity keys removed
    at every nesting level, so a whole RunSpec dict (settings nested) and an `identity` (already
    reduced) hash alike when they describe the same settings.
    """

    def strip(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                str(k): strip(v)
                for k, v in value.items()
                if is_identity_key(str(k))
                and (k not in APPLIES_WHEN or APPLIES_WHEN[str(k)](value))
            }
        if isinstance(value, (list, tuple)):
            return [strip(v) for v in value]
        return value

    canonical = json.dumps(strip(config), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
