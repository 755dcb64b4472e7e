"""The results vocabulary: one torch-free place for what every layer must agree on.

`config_key`, the columns that make two runs "the same configuration" (hardware included),
metric definitions (name, label, unit, better direction), the energy label, the `Layout` value,
and which kind of workload a run is. The spec, the launcher, the store, compare, reports and the
dashboard import it; it imports nothing of theirs.
"""

from greenbench.vocabulary.energy import (
    EMULATED_SOURCE,
    MODELLED_SOURCES,
    NODE_SOURCES,
    SIMULATED_SOURCE,
    energy_label,
    is_simulated,
)
from greenbench.vocabulary.identity import (
    POOLED_OVER_SEEDS,
    SAME_CONFIGURATION,
    config_key,
)
from greenbench.vocabulary.layout import DEGREES, MESH_ORDER, Layout, resolve_layout
from greenbench.vocabulary.metrics import (
    ALIASES,
    COMPARABLE_METRICS,
    LEADERBOARD_METRICS,
    METRICS,
    TARGET_FIGURES,
    Better,
    Metric,
)
from greenbench.vocabulary.workload_kinds import (
    OWN_LOOP_STRATEGY,
    OWN_MEASUREMENT_KINDS,
    WHOLE_PROCESS_STRATEGY,
    is_user_workload,
)

__all__ = [
    "ALIASES",
    "COMPARABLE_METRICS",
    "DEGREES",
    "EMULATED_SOURCE",
    "LEADERBOARD_METRICS",
    "MESH_ORDER",
    "METRICS",
    "MODELLED_SOURCES",
    "NODE_SOURCES",
    "OWN_LOOP_STRATEGY",
    "OWN_MEASUREMENT_KINDS",
    "POOLED_OVER_SEEDS",
    "SAME_CONFIGURATION",
    "SIMULATED_SOURCE",
    "TARGET_FIGURES",
    "WHOLE_PROCESS_STRATEGY",
    "Better",
    "Layout",
    "Metric",
    "config_key",
    "energy_label",
    "is_simulated",
    "is_user_workload",
    "resolve_layout",
]
