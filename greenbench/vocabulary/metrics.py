"""The metrics greenbench stores and compares: name, label, unit, and which way is better.

One registry for the leaderboard, the dashboard, reports and `compare`. ``energy`` marks a
metric derived from an energy figure (so it can be an estimate, and is labelled so);
``per_repeat`` marks a column of the ``results`` table (the others are derived per
configuration, such as CO2 per million tokens); ``to_target`` marks a figure to a target loss,
which a repeat that did not reach the target lacks: it took more than its budget, so it counts
as worse than every repeat that did (`TARGET_FIGURES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Better = Literal["max", "min"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric: its column name, how it is shown, its unit and its better direction."""

    name: str
    label: str
    unit: str
    better: Better
    energy: bool = False
    per_repeat: bool = True
    to_target: bool = False

    @property
    def column(self) -> str:
        return self.name

    @property
    def lower_is_better(self) -> bool:
        return self.better == "min"


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("tokens_per_s", "tokens/s", "tokens/s", "max"),
        Metric("joules_per_token", "J/token (gross)", "J/token", "min", energy=True),
        Metric("net_joules_per_token", "J/token (net of idle)", "J/token", "min", energy=True),
        Metric("energy_j", "energy (gross)", "J", "min", energy=True),
        Metric("energy_net_j", "energy (net of idle)", "J", "min", energy=True),
        Metric("co2_g", "CO2", "g", "min", energy=True),
        Metric("co2_g_per_mtok", "CO2 g / M tokens", "g/Mtoken", "min", True, per_repeat=False),
        # model FLOPs utilisation under each FLOP convention (`greenbench.vocabulary.flops`)
        Metric("mfu", "MFU (PaLM)", "fraction of peak", "max"),
        Metric("mfu_causal", "MFU (causal)", "fraction of peak", "max"),
        Metric("peak_mem_bytes", "peak memory (bytes)", "bytes", "min"),
        Metric("wait_fraction", "wait fraction", "fraction of rank-time", "min"),
        Metric("seconds", "window seconds", "s", "min"),
        Metric("step_time_p50_s", "step time p50 (s)", "s", "min"),
        Metric("step_time_p95_s", "step time p95 (s)", "s", "min"),
        Metric("loss", "training loss (window mean)", "nats/token", "min"),
        # a run to a target loss (``train.until = target``): unknown where it was not reached
        # (energy, per_repeat, to_target)
        Metric("energy_to_target_j", "energy to target (gross)", "J", "min", True, True, True),
        Metric("energy_to_target_net_j", "energy to target (net)", "J", "min", True, True, True),
        Metric("seconds_to_target", "time to target", "s", "min", to_target=True),
        Metric("tokens_to_target", "tokens to target", "tokens", "min", to_target=True),
        Metric("best_val_loss", "best validation loss", "nats/token", "min"),
    )
}

#: the figures to a target loss (their medians over repeats count a repeat that did not reach
#: the target as above every one that did: `greenbench.aggregate.target.target_medians`)
TARGET_FIGURES = tuple(name for name, m in METRICS.items() if m.to_target)

#: what the leaderboard aggregates per configuration (median with a CI; memory: the maximum)
LEADERBOARD_METRICS = (
    "tokens_per_s",
    "joules_per_token",
    "net_joules_per_token",
    "mfu",
    "mfu_causal",
    "peak_mem_bytes",
    "co2_g_per_mtok",
    "wait_fraction",
    "step_time_p50_s",
    "loss",
)
#: what `greenbench compare` can judge
COMPARABLE_METRICS = (
    "joules_per_token",
    "net_joules_per_token",
    "energy_j",
    "energy_net_j",
    "co2_g",
    "seconds",
    "step_time_p50_s",
    "step_time_p95_s",
    "peak_mem_bytes",
    "tokens_per_s",
    "mfu",
    "mfu_causal",
    *TARGET_FIGURES,
)
#: short names `compare --metric` accepts
ALIASES = {
    "energy": "energy_j",
    "net_energy": "energy_net_j",
    "co2": "co2_g",
    "step_time": "step_time_p50_s",
    "peak_mem": "peak_mem_bytes",
    "throughput": "tokens_per_s",
    "energy_to_target": "energy_to_target_j",
    "time_to_target": "seconds_to_target",
}
