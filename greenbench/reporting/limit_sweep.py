"""Power-limit sweeps as numbers: per limit, time against energy; the Pareto front; the knee; and
what Zeus's GlobalPowerLimitOptimizer would choose from the same measurements. Pure (DataFrames
in, DataFrames and numbers out), shared by the report and the dashboard.

A **sweep** is the runs of one configuration that differ only in their power limit (the
configuration's settings without ``gpu.power_limit_*``, on one device type, with one kind of
energy figure: a measurement and an emulated GPU's model are never one sweep). Each limit's row
holds medians over the newest run's repeats: tokens/s, J/token, time per million tokens, the
GPUs' mean and peak power, and relative to the highest limit in the sweep (the reference, usually
the default), the slowdown (time ratio) and the energy saved.

* **Front**: the limits no other limit beats on both time and J/token (`pareto_front`).
* **Knee**: the limit with the lowest J/token whose slowdown is at most `MAX_SLOWDOWN` (10 %
  longer than the reference: tokens/s at most 9.1 % lower).
* **Zeus's choice**, computed from this sweep with Zeus's own published selectors, not by running
  its training callbacks (which profile every limit in 25 W steps during one job):
  ``GlobalPowerLimitOptimizer``'s default selector is ``ZeusCost(eta_knob=0.5, world_size)``,
  the limit minimising ``η·E + (1 − η)·MaxPower·T`` with MaxPower the highest measured limit ×
  the GPUs (ml-energy/zeus ``zeus/optimizer/power_limit.py``, ``zeus/utils/metric.py``; You,
  Chung, Chowdhury, NSDI 2023); its ``MaxSlowdownConstraint(factor=1.1)`` picks the lowest limit
  within 1.1× the time of the highest. Energy and time are per token here (every limit trains the
  same tokens per step), which leaves both choices unchanged: each is a minimum of a linear
  function of energy and time.

**Consistency.** A lower power limit can only lower a GPU's clock, so it never makes training
faster. A sweep in which some limit's time per token is below a higher limit's *beyond its
noise* is **inconsistent** (`consistency`): its runs did not see the same machine (another job
shared it while the higher limit ran, say), and no knee, front or choice is named from it, only
a note saying which limits disagree. Beyond its noise means: the lower limit's slowest repeat is
faster than the higher limit's fastest repeat by more than `TIME_TOLERANCE` of the latter (both
limits' repeat ranges, plus a margin for run-to-run drift that repeats within one run do not
show). An emulated GPU's times are its model's applied to one base step
(`greenbench.rank.emulated_gpu`), so its sweeps are consistent by construction, whatever the
CPU was doing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from greenbench.config import section_settings
from greenbench.reporting.leaderboard import pareto_front
from greenbench.settings import GpuSettings, identity_of
from greenbench.vocabulary import config_key, energy_label

#: the knee's slowdown bound (time at the limit over time at the highest limit)
MAX_SLOWDOWN = 1.10
#: how much faster than a higher limit a lower one may seem (beyond both limits' repeat ranges)
#: before the sweep counts as inconsistent: run-to-run drift of a GPU's time per step is ~1 %
TIME_TOLERANCE = 0.02
#: Zeus's default ZeusCost knob (GlobalPowerLimitOptimizer's default selector)
ZEUS_ETA = 0.5
LIMIT_KEYS = tuple(s.key for s in section_settings(GpuSettings))
#: what an inconsistent sweep says instead of a knee
INCONSISTENT = (
    "Inconsistent sweep: a lower power limit cannot make training faster, so these runs did not "
    "see the same machine (was it shared while a higher limit ran? see each run's contention); "
    "no knee, Pareto front or Zeus choice is named from it. Run the sweep again on a quiet "
    "machine"
)
#: the columns a sweep reads of every repeat (runs and results)
COLUMNS = (
    "run_id", "config", "config_name", "workload", "started_at", "repeat", "device_type",
    "nproc", "nnodes", "energy_source", "energy_measured", "power_limit_w",
    "power_limit_default_w", "tokens_per_s", "joules_per_token", "gpu_power_avg_w",
    "gpu_power_peak_w", "energy_node_j", "tokens",
)  # fmt: skip


def sweep_key(config: Any, workload: str) -> str:
    """The identity of a run's configuration without its power limit."""
    settings = (json.loads(config) if isinstance(config, str) else config or {}).get("settings", {})
    rest = {k: v for k, v in settings.items() if k not in LIMIT_KEYS}
    return config_key(identity_of(rest, workload))


def base_name(config_name: str) -> str:
    """A configuration's name without its ``limit=…`` part."""
    return " ".join(p for p in str(config_name).split() if not p.startswith("limit="))


def zeus_cost(energy: float, time: float, eta: float, max_power: float) -> float:
    """Zeus's cost metric: ``η·E + (1 − η)·MaxPower·T`` (zeus/utils/metric.py ``zeus_cost``)."""
    return eta * energy + (1 - eta) * max_power * time


def zeus_cost_choice(
    limits_w: Sequence[float],
    joules: Sequence[float],
    seconds: Sequence[float],
    *,
    eta: float = ZEUS_ETA,
    world_size: int = 1,
) -> float:
    """The limit Zeus's ``ZeusCost(eta_knob, world_size)`` selects from these measurements."""
    max_power = max(limits_w) * world_size
    costs = [zeus_cost(e, t, eta, max_power) for e, t in zip(joules, seconds, strict=True)]
    return limits_w[min(range(len(costs)), key=costs.__getitem__)]


def zeus_slowdown_choice(
    limits_w: Sequence[float], seconds: Sequence[float], factor: float = MAX_SLOWDOWN
) -> float:
    """The limit Zeus's ``MaxSlowdownConstraint(factor)`` selects: the lowest limit whose time
    is within ``factor`` × the time at the highest limit."""
    top = max(range(len(limits_w)), key=limits_w.__getitem__)
    feasible = [w for w, t in zip(limits_w, seconds, strict=True) if t <= factor * seconds[top]]
    return min(feasible)


@dataclass
class Sweep:
    """One configuration over its power limits (module docstring)."""

    key: str
    name: str
    device_type: str
    energy: str  # the energy label: "measured (nvml)", "emulated (GPU power model)", …
    devices: int
    table: pd.DataFrame  # one row per limit, highest first
    knee_w: float | None = None
    zeus_cost_w: float | None = None
    zeus_slowdown_w: float | None = None
    notes: list[str] = field(default_factory=list)
    #: why the sweep is inconsistent (one sentence per pair of limits), empty when it is not
    inconsistencies: list[str] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        return self.energy.startswith("measured")

    @property
    def consistent(self) -> bool:
        """Whether no lower limit is faster than a higher one beyond the noise (module doc)."""
        return not self.inconsistencies


def _per_limit(rows: pd.DataFrame) -> pd.DataFrame:
    """Medians per limit, over the newest run of each limit."""
    newest = rows.sort_values("started_at").groupby("power_limit_w")["run_id"].last()
    rows = rows[rows["run_id"].isin(set(newest))].copy()
    rows["seconds_per_mtok"] = 1e6 / rows["tokens_per_s"]
    table = (
        rows.groupby("power_limit_w")
        .agg(
            tokens_per_s=("tokens_per_s", "median"),
            joules_per_token=("joules_per_token", "median"),
            gpu_power_avg_w=("gpu_power_avg_w", "median"),
            gpu_power_peak_w=("gpu_power_peak_w", "max"),
            default_w=("power_limit_default_w", "last"),
            run_id=("run_id", "last"),
            repeats=("run_id", "size"),
            time_fastest=("seconds_per_mtok", "min"),
            time_slowest=("seconds_per_mtok", "max"),
        )
        .reset_index()
        .rename(columns={"power_limit_w": "limit_w"})
        .sort_values("limit_w", ascending=False)
        .reset_index(drop=True)
    )
    table["seconds_per_mtok"] = 1e6 / table["tokens_per_s"]
    return table


def consistency(table: pd.DataFrame, tolerance: float = TIME_TOLERANCE) -> list[str]:
    """Each limit of a per-limit table (highest first, with ``time_fastest`` and
    ``time_slowest`` over the repeats) that is faster than a higher limit beyond the noise
    (module docstring), as a sentence naming the highest such limit; empty for a consistent
    sweep."""
    out = []
    rows = list(table.itertuples())
    for i, low in enumerate(rows):
        for high in rows[:i]:  # the highest limit it undercuts is named
            if low.limit_w < high.limit_w and low.time_slowest < high.time_fastest * (
                1 - tolerance
            ):
                faster = 1 - low.seconds_per_mtok / high.seconds_per_mtok
                out.append(
                    f"at {low.limit_w:g} W training took {faster:.1%} less time per token than "
                    f"at {high.limit_w:g} W (its slowest repeat {low.time_slowest:,.0f} s per "
                    f"million tokens, the fastest there {high.time_fastest:,.0f} s: beyond both "
                    f"limits' repeats and a {tolerance:.0%} margin)"
                )
                break
    return out


def analyse(table: pd.DataFrame, devices: int) -> dict[str, Any]:
    """Slowdown, saving, front, knee and Zeus's choices of one sweep's per-limit table (it gains
    the columns ``slowdown``, ``saving`` and ``on_front``). An inconsistent sweep (`consistency`)
    has no front, knee or choice, only its ``inconsistencies``."""
    ref = table.iloc[0]  # the highest limit
    table["slowdown"] = table["seconds_per_mtok"] / ref["seconds_per_mtok"]
    table["saving"] = 1 - table["joules_per_token"] / ref["joules_per_token"]
    out: dict[str, Any] = {"knee_w": None, "zeus_cost_w": None, "zeus_slowdown_w": None}
    out["inconsistencies"] = consistency(table)
    if out["inconsistencies"]:
        table["on_front"] = False
        return out
    table["on_front"] = pareto_front(table, "seconds_per_mtok", "joules_per_token", "min", "min")
    known = table.dropna(subset=["joules_per_token", "seconds_per_mtok"])
    if known.empty or math.isnan(ref["joules_per_token"]):
        return out
    within = known[known["slowdown"] <= MAX_SLOWDOWN]
    if not within.empty:
        out["knee_w"] = float(within.loc[within["joules_per_token"].idxmin(), "limit_w"])
    limits = [float(w) for w in known["limit_w"]]
    out["zeus_cost_w"] = float(
        zeus_cost_choice(
            limits,
            list(known["joules_per_token"]),
            list(known["seconds_per_mtok"] / 1e6),
            world_size=devices,
        )
    )
    out["zeus_slowdown_w"] = float(zeus_slowdown_choice(limits, list(known["seconds_per_mtok"])))
    return out


def sweeps(rows: pd.DataFrame) -> list[Sweep]:
    """Every sweep in ``rows`` (one row per repeat, `COLUMNS`) with at least two limits."""
    if rows.empty or "power_limit_w" not in rows:
        return []
    rows = rows[rows["power_limit_w"].notna()].copy()
    if rows.empty:
        return []
    pairs = zip(rows["config"], rows["workload"], strict=True)
    rows["sweep"] = [sweep_key(config, workload) for config, workload in pairs]
    sources = zip(rows["energy_source"], rows["energy_measured"], strict=True)
    rows["energy"] = [energy_label(source, measured) for source, measured in sources]
    out = []
    keys = ["sweep", "device_type", "energy"]
    for (key, device_type, energy), group in rows.groupby(keys, sort=False):
        table = _per_limit(group)
        if len(table) < 2:
            continue
        devices = int(group["nproc"].iloc[-1] * group["nnodes"].iloc[-1])
        sweep = Sweep(
            key=str(key),
            name=base_name(group.sort_values("started_at")["config_name"].iloc[-1]),
            device_type=str(device_type),
            energy=str(energy),
            devices=devices,
            table=table,
            **analyse(table, devices),
        )
        if sweep.consistent and sweep.knee_w is None:
            sweep.notes.append(
                f"no limit below the highest stays within {MAX_SLOWDOWN - 1:.0%} of its speed"
            )
        out.append(sweep)
    return sorted(out, key=lambda s: (not s.measured, s.name))
