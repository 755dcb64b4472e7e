"""What makes two runs "the same configuration", defined once.

A configuration's identity is its settings minus those that do not change *what* is measured
(how often, under which label or suite, with which timeout, test instrumentation): each setting
declares when it counts (`greenbench.config.Identity`), and `greenbench.settings.identity_of`
reduces a run's settings to it. The seed is part of it (another seed is another data stream and
another initialisation), and so are the settings the launcher resolves before a run starts
(device, precision, the layout's degrees, the kernel that ``model.scan: auto`` became, whether
ranks ran under CPU quotas), so runs on different kernels or arrangements are never pooled.
``config_key`` hashes it.

Two stored runs are comparable only when they also ran on the same kind of hardware and their
energy came from the same kind of source: `SAME_CONFIGURATION` lists those columns, and the
leaderboard, `compare`, reports and the dashboard all group by it. Runs of one configuration
with different seeds (``greenbench run --seeds``) differ only in their ``config_key``; their
``seed_group`` (the key of the identity without its seed, `greenbench.settings.seed_group_of`)
is the same, and `POOLED_OVER_SEEDS`, the same columns with it in the key's place, is what the
leaderboard's intervals and `compare` pool over, each seed's run one sample.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

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


#: `SAME_CONFIGURATION` with the seed group in the configuration key's place: the runs of one
#: configuration's seeds, on the same hardware, with the same kind of energy figure
POOLED_OVER_SEEDS = tuple("seed_group" if c == "config_key" else c for c in SAME_CONFIGURATION)


def config_key(identity: Mapping[str, Any]) -> str:
    """Stable 16-hex-char hash of a configuration's identity (the settings that define it, plus
    its workload: `greenbench.settings.identity_of`): what makes two runs "the same config".
    Canonical JSON (sorted keys, no whitespace) of ``identity``."""
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
