"""SkipPipe against a full pipeline: the `skippipe` workload's real runs paired, and the
simulated runs listed apart.

**Real runs.** The newest ok run of each configuration (medians over its repeats), grouped by
everything but the schedule, the skip ratio and the straggler (``emulate.slow_nodes``): in each
group and straggler condition, the full pipeline (GPipe order) is paired with every skipping
schedule. Per condition: iteration time (``step_time_p50_s``), tokens/s, J/token (with its energy
label) and loss of each side, and the gain, full ÷ skipping iteration time. Then:

* the gain from visiting fewer stages = full ÷ skipping *without* a straggler: a microbatch runs
  fewer blocks, the same compute removed in both conditions;
* the gain *with* the straggler = full ÷ skipping with it;
* the part due to routing around the straggler = (gain with) ÷ (gain without): what the
  scheduler's paths save beyond skipping (only the straggler case has it);
* each run's loss beside it. A loss averaged over a short measured window is not the cost in
  convergence of skipping: that comes from ``benchmarks/skippipe_quality.py``
  (``reports/skippipe-cpu/``: loss against tokens and wall-clock, perplexity with stages
  removed).

**Simulated runs** (``skippipe.mode = "simulate"``, energy ``simulated (model)``) are never
mixed with these: a table of their own, each beside the simulated full pipeline of its network,
stages and straggler where one was simulated. Used by ``greenbench report``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from greenbench.config import NEVER, setting_of
from greenbench.reporting.leaderboard import simulated_mask
from greenbench.reporting.repeats import newest_runs, read_repeats
from greenbench.reporting.section import ReportContext
from greenbench.settings import SCHEMA, RunSettings, SkipPipeSettings

WORKLOAD = "skippipe"
MEDIANS = ["step_time_p50_s", "tokens_per_s", "joules_per_token", "loss"]
COLUMNS = [
    "run_id", "config_key", "config_name", "config", "workload", "strategy", "started_at",
    "energy_source", "energy_measured", "simulated", "device_type", "nproc", *MEDIANS,
]  # fmt: skip
#: settings that tell the paired runs of a group apart (everything else must be equal)
VARYING = tuple(
    setting_of(SkipPipeSettings, name).key
    for name in ("schedule", "skip", "slow_nodes", "slowdown")
)
#: settings that do not change what a simulated or real iteration does: those that are never
#: part of a configuration's identity (repeats, timeout, the idle window, the node meter …),
#: the layout's spelling, and the seed (another seed is the same iteration on other tokens)
IGNORED = (
    *(k for k, s in SCHEMA.settings.items() if s.identity is NEVER),
    "label",
    "suite",
    setting_of(RunSettings, "seed").key,
)
NO_STRAGGLER = "no straggler"
QUALITY = (
    "`benchmarks/skippipe_quality.py` (reports/skippipe-cpu/: loss against tokens and "
    "wall-clock of skip-trained against full-trained models, perplexity with stages removed)"
)


def _settings(config: Any) -> dict[str, Any]:
    try:
        data = json.loads(config) if isinstance(config, str) else config
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    inner = data.get("settings")
    return dict(inner) if isinstance(inner, dict) else {}


def _skippipe(settings: dict[str, Any]) -> Any:
    """The SkipPipe section of stored ``settings`` (its defaults where they lack it)."""
    return SCHEMA.config(settings).skippipe or SkipPipeSettings()


def condition(settings: dict[str, Any]) -> str:
    """``no straggler``, or ``slow=2×3`` naming the slow nodes and their factor."""
    sp = _skippipe(settings)
    slow = str(sp.slow_nodes or "").strip()
    if not slow:
        return NO_STRAGGLER
    return f"slow={slow}×{float(sp.slowdown):g}"


def _group(settings: dict[str, Any], device_type: str) -> str:
    """Everything but `VARYING`, as one key (the device type included)."""
    real = _skippipe(settings).mode != "simulate"  # a real run's network is its ranks
    network = setting_of(SkipPipeSettings, "network").key
    rest = {
        k: v
        for k, v in settings.items()
        if k not in VARYING and k not in IGNORED and not (real and k == network)
    }
    return json.dumps(rest, sort_keys=True, default=str) + "|" + str(device_type)


def _describe(settings: dict[str, Any]) -> str:
    """A group's fixed conditions in words."""
    config = SCHEMA.config(settings)
    sp = _skippipe(settings)
    if sp.network == "gcp12" and sp.mode == "simulate":
        return "SkipPipe's published 20 nodes over 12 GCP regions"
    model, data = config.model, config.data
    words = (
        f"{model.family if model else None}/{model.size if model else None} "
        f"seq={data.seq_len if data else None}, stages {sp.stages}, links "
        f"{sp.link_latency_ms:g} ms / {sp.link_bandwidth_gbps:g} Gb/s"
    )
    if sp.fail_node >= 0:
        words += f", node {sp.fail_node} fails at {sp.fail_step}"
    return words


def read_runs(db_path: str | Path) -> pd.DataFrame:
    """One row per SkipPipe configuration (its newest ok run, medians over its repeats), real
    runs of the workload and simulated runs of any, with their settings unpacked (empty when
    the database holds none)."""
    rows = read_repeats(db_path, COLUMNS)
    if rows.empty:
        return pd.DataFrame()
    rows["is_simulated"] = simulated_mask(rows)
    rows = rows[rows["is_simulated"] | (rows["workload"] == WORKLOAD)]
    rows = rows[rows["strategy"] == "skippipe"]
    if rows.empty:
        return pd.DataFrame()
    rows = newest_runs(rows)
    out = (
        rows.groupby("run_id", sort=False)
        .agg(
            **{m: (m, "median") for m in MEDIANS},
            energy=("energy", lambda e: " / ".join(sorted(set(e)))),
            repeats=("run_id", "size"),
            config=("config", "first"),
            config_name=("config_name", "first"),
            device_type=("device_type", "first"),
            nodes=("nproc", "first"),
            is_simulated=("is_simulated", "first"),
            started_at=("started_at", "first"),
        )
        .reset_index()
    )
    settings = [_settings(c) for c in out["config"]]
    sections = [_skippipe(s) for s in settings]
    out["schedule"] = [sp.schedule for sp in sections]
    out["skip"] = [float(sp.skip) for sp in sections]
    out["network"] = [sp.network for sp in sections]
    out["stages"] = [sp.stages for sp in sections]
    out["condition"] = [condition(s) for s in settings]
    out["group"] = [_group(s, d) for s, d in zip(settings, out["device_type"], strict=True)]
    out["described"] = [_describe(s) for s in settings]
    return out.sort_values("started_at").reset_index(drop=True)


def pairs(real: pd.DataFrame) -> pd.DataFrame:
    """Per group, straggler condition and skipping schedule (with its skip ratio): the full
    pipeline's and the schedule's figures and the gain, full ÷ skipping iteration time."""
    columns = ["group", "described", "condition", "schedule", "skip", "gain"]
    out = []
    for (group, cond), rows in real.groupby(["group", "condition"], sort=False):
        full = rows[rows["schedule"] == "full"]
        if full.empty:
            continue
        base = full.iloc[-1]  # the newest full pipeline (it visits every stage, any skip)
        for r in rows[rows["schedule"] != "full"].itertuples():
            out.append(
                {
                    "group": group,
                    "described": r.described,
                    "condition": cond,
                    "schedule": r.schedule,
                    "skip": r.skip,
                    "gain": base["step_time_p50_s"] / r.step_time_p50_s,
                    **{f"full_{m}": base[m] for m in (*MEDIANS, "energy")},
                    **{m: getattr(r, m) for m in (*MEDIANS, "energy")},
                }
            )
    if not out:
        return pd.DataFrame(columns=columns)
    return pd.DataFrame(out)


def _g(v: Any, spec: str = ".4g") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return format(v, spec)


def _loss(v: Any) -> str:
    return _g(v, ".4f")


def real_markdown(real: pd.DataFrame) -> list[str]:
    """The paired real runs: one table per group, then the gains split (module docstring)."""
    paired = pairs(real)
    if paired.empty:
        return [
            "",
            "No full pipeline and skipping schedule were measured under the same conditions, so "
            "no gain can be given.",
        ]
    lines: list[str] = []
    for _, rows in paired.groupby("group", sort=False):
        lines += [
            "",
            f"**{rows['described'].iloc[0]}**",
            "",
            "| straggler | schedule | iteration (s): full → skipping | full ÷ skipping "
            "| tokens/s: full → skipping | J/token: full → skipping | loss: full → skipping |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows.itertuples():
            energy = r.energy if r.energy == r.full_energy else f"{r.full_energy} → {r.energy}"
            lines.append(
                f"| {r.condition} | {r.schedule} skip={r.skip:g} "
                f"| {_g(r.full_step_time_p50_s)} → {_g(r.step_time_p50_s)} | {r.gain:.2f}× "
                f"| {_g(r.full_tokens_per_s, ',.0f')} → {_g(r.tokens_per_s, ',.0f')} "
                f"| {_g(r.full_joules_per_token)} → {_g(r.joules_per_token)} ({energy}) "
                f"| {_loss(r.full_loss)} → {_loss(r.loss)} |"
            )
        lines += ["", *_split(rows)]
    return lines


def _split(rows: pd.DataFrame) -> list[str]:
    """The gain from fewer stages, the gain with each straggler, and the routing part."""
    out = []
    for (schedule, skip), sched in rows.groupby(["schedule", "skip"], sort=False):
        name = f"{schedule} skip={skip:g}"
        without = sched[sched["condition"] == NO_STRAGGLER]
        if without.empty:
            out.append(f"- {name}: no run without a straggler, so the gains cannot be split.")
            continue
        fewer = float(without["gain"].iloc[0])
        w = without.iloc[0]
        out.append(
            f"- {name}, gain from visiting fewer stages (no straggler): full ÷ skipping = "
            f"{fewer:.2f}× (loss {_loss(w['full_loss'])} full, {_loss(w['loss'])} skipping)"
        )
        for r in sched[sched["condition"] != NO_STRAGGLER].itertuples():
            out.append(
                f"- {name}, with the straggler ({r.condition}): gain {r.gain:.2f}×; of it, "
                f"routing around the straggler {r.gain / fewer:.2f}× (= {r.gain:.2f} ÷ "
                f"{fewer:.2f}; loss {_loss(r.full_loss)} full, {_loss(r.loss)} skipping)"
            )
    return out


def simulated_markdown(sims: pd.DataFrame) -> list[str]:
    """The simulated runs' table, each beside its simulated full pipeline."""
    lines = [
        "",
        "| configuration | network | nodes | schedule | straggler | iteration (s) | ÷ full "
        "| tokens/s | J/token | energy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sims.sort_values(["network", "stages", "condition", "started_at"]).itertuples():
        same = sims[(sims["group"] == r.group) & (sims["condition"] == r.condition)]
        full = same[same["schedule"] == "full"]
        ratio = f"{r.step_time_p50_s / full['step_time_p50_s'].iloc[-1]:.3f}" if len(full) else "—"
        skip = "" if r.schedule == "full" else f" skip={r.skip:g}"
        cells = [
            r.config_name, r.network, _g(r.nodes, "d") if pd.notna(r.nodes) else "n/a",
            f"{r.schedule}{skip}", r.condition, _g(r.step_time_p50_s), ratio,
            _g(r.tokens_per_s, ",.0f"), _g(r.joules_per_token), r.energy,
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return lines


def section(db_path: str | Path) -> list[str]:
    """The report's SkipPipe section (empty when the database holds no SkipPipe run)."""
    table = read_runs(db_path)
    if table.empty:
        return []
    real = table[~table["is_simulated"].astype(bool)]
    sims = table[table["is_simulated"].astype(bool)]
    lines: list[str] = []
    if not real.empty:
        lines += [
            "",
            "## SkipPipe against a full pipeline (measured)",
            "",
            "Real runs of the `skippipe` workload: the full pipeline (every microbatch through "
            "every stage, GPipe order) beside each skipping schedule, under the same emulated "
            "links, with and without a straggler (a node computing slower). Iteration is the "
            "median step time. The gain without a straggler comes from visiting fewer stages "
            "(the same compute removed in both conditions); the gain with it also holds what "
            "routing around the straggler saves, which only that case has: their ratio.",
            *real_markdown(real),
            "",
            "Loss here is the mean training loss over a short measured window (a few steps from "
            "the same initialisation): it is not the cost in convergence of skipping stages. "
            f"That comes from {QUALITY}.",
        ]
    if not sims.empty:
        lines += [
            "",
            "## Simulated configurations (not measured)",
            "",
            "> **Simulated, not measured.** These runs launched no worker: SkipPipe's "
            "discrete-event simulator timed each iteration's schedule, and their energy is "
            "modelled from simulated busy and idle seconds at assumed watts (energy source "
            "`model`). They are left out of the leaderboard, the Pareto fronts and every "
            "comparison of measurements, and are never compared with a measurement.",
            *simulated_markdown(sims),
        ]
    return lines


class SkipPipeSection:
    """`ReportSection`: `section` over the whole database (a REF narrows the report to runs
    that are not this section's)."""

    name = "skippipe"
    order = 60
    doc = "SkipPipe against a full pipeline (measured), and simulated configurations apart"

    def applies(self, context: ReportContext) -> bool:
        """When the report reads the whole database."""
        return context.whole_database

    def render(self, context: ReportContext) -> list[str]:
        """The measured pairs and the simulated table (none when the database holds no such run)."""
        return section(context.db_path)
