"""SkipPipe against full pipelines: the `skippipe` workload's real runs ranked within their own
question, and the simulated runs listed apart.

**Real runs.** The newest ok run of each configuration (medians over its repeats), grouped by
everything but the schedule, the skip ratio and the straggler (``emulate.slow_nodes``). In each
group and straggler condition every schedule is listed and ranked (`ranked`: J per useful token,
then useful tokens/s): the full pipeline (GPipe order, a stage's replicas in turn), the
straggler-aware full pipeline (``full-aware``: every stage, but only through replicas that are
not stragglers), random skip and SkipPipe. Beside tokens/s and J/token stand the visited share
(the share of the (token, block) work the paths ran) and the figures over useful tokens (tokens
× that share): a skipping run reads every token but trains each through part of the model, so
only the useful figures compare it with a full pipeline. Skipping runs are ranked here only,
never on the leaderboard (`greenbench.reporting.leaderboard.leaderboard` leaves them out).

The baseline is the straggler-aware full pipeline: a full pipeline that keeps feeding the
straggler is a weak baseline, and most of a gain measured against it is that weakness. Then:

* each schedule's gain = straggler-aware full ÷ its iteration time (``step_time_p50_s``), and
  beside it the gain against the plain full pipeline;
* the straggler-aware full pipeline's own gain over the plain one (what leaving the straggler out
  gains before any stage is skipped);
* the gain from visiting fewer stages = the gain without a straggler (where both full pipelines
  run one plan), and with it the part due to routing around the straggler = (gain with) ÷ (gain
  without), both against the straggler-aware baseline;
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
from greenbench.strategies.skippipe.settings import skips

WORKLOAD = "skippipe"
MEDIANS = [
    "step_time_p50_s", "tokens_per_s", "joules_per_token", "loss", "visited_share",
    "useful_tokens_per_s", "joules_per_useful_token",
]  # fmt: skip
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


def _baseline(rows: pd.DataFrame, schedule: str) -> pd.Series | None:
    """The newest run of ``schedule`` among ``rows`` (one group and condition), or None."""
    found = rows[rows["schedule"] == schedule]
    return None if found.empty else found.iloc[-1]


def pairs(real: pd.DataFrame) -> pd.DataFrame:
    """Per group, straggler condition and schedule other than the plain full pipeline: the
    plain full pipeline's and the schedule's figures, ``gain`` (full ÷ this iteration time)
    and ``aware_gain`` (straggler-aware full ÷ this iteration time; without a straggler the
    two full pipelines run the same plan, so the plain one stands in where the aware one was
    not measured; NaN where there is no baseline)."""
    columns = ["group", "described", "condition", "schedule", "skip", "gain", "aware_gain"]
    out = []
    for (group, cond), rows in real.groupby(["group", "condition"], sort=False):
        base = _baseline(rows, "full")
        aware = _aware(rows, cond)
        if base is None and aware is None:
            continue
        for r in rows[rows["schedule"] != "full"].itertuples():
            out.append(
                {
                    "group": group,
                    "described": r.described,
                    "condition": cond,
                    "schedule": r.schedule,
                    "skip": r.skip,
                    "gain": _ratio(base, r),
                    "aware_gain": _ratio(aware, r),
                    **{f"full_{m}": _get(base, m) for m in (*MEDIANS, "energy")},
                    **{f"aware_{m}": _get(aware, m) for m in (*MEDIANS, "energy")},
                    **{m: getattr(r, m) for m in (*MEDIANS, "energy")},
                }
            )
    if not out:
        return pd.DataFrame(columns=columns)
    return pd.DataFrame(out)


def _get(row: pd.Series | None, column: str) -> Any:
    return math.nan if row is None else row[column]


def _ratio(base: pd.Series | None, r: Any) -> float:
    """Baseline ÷ this iteration time (NaN without a baseline)."""
    if base is None:
        return math.nan
    return float(base["step_time_p50_s"]) / float(r.step_time_p50_s)


def ranked(rows: pd.DataFrame) -> pd.DataFrame:
    """One group and condition's runs, every schedule, ranked within their own question: by J
    per useful token (fewest first), then useful tokens/s (most first); figures unknown last."""
    order = rows.assign(
        _j=pd.to_numeric(rows["joules_per_useful_token"], errors="coerce"),
        _t=-pd.to_numeric(rows["useful_tokens_per_s"], errors="coerce"),
    )
    return order.sort_values(["_j", "_t"], na_position="last").drop(columns=["_j", "_t"])


def _g(v: Any, spec: str = ".4g") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    try:
        if pd.isna(v):
            return "n/a"
    except (TypeError, ValueError):
        pass
    return format(v, spec)


def _loss(v: Any) -> str:
    return _g(v, ".4f")


def _times(v: Any) -> str:
    return "n/a" if v is None or pd.isna(v) else f"{v:.2f}×"


def _schedule(r: Any) -> str:
    return f"{r.schedule} skip={r.skip:g}" if skips(r.schedule) else r.schedule


def real_markdown(real: pd.DataFrame) -> list[str]:
    """The real runs: per group a table of every schedule under each condition, ranked within
    it, then each schedule's gain against the baselines (module docstring)."""
    paired = pairs(real)
    if paired.empty:
        return [
            "",
            "No full pipeline and skipping schedule were measured under the same conditions, so "
            "no gain can be given.",
        ]
    lines: list[str] = []
    for group, runs in real.groupby("group", sort=False):
        if group not in set(paired["group"]):
            continue
        lines += [
            "",
            f"**{runs['described'].iloc[0]}**",
            "",
            "| straggler | rank | schedule | visited share | iteration (s) | straggler-aware "
            "full ÷ it | tokens/s | useful tokens/s | J/token | J/useful token | energy | loss |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for cond, rows in runs.groupby("condition", sort=False):
            aware = _aware(rows, cond)
            for rank, r in enumerate(ranked(rows).itertuples(), 1):
                lines.append(
                    f"| {cond} | {rank} | {_schedule(r)} | {_g(r.visited_share, '.3f')} "
                    f"| {_g(r.step_time_p50_s)} | {_times(_ratio(aware, r))} "
                    f"| {_g(r.tokens_per_s, ',.0f')} | {_g(r.useful_tokens_per_s, ',.0f')} "
                    f"| {_g(r.joules_per_token)} | {_g(r.joules_per_useful_token)} "
                    f"| {r.energy} | {_loss(r.loss)} |"
                )
        lines += ["", *_split(paired[paired["group"] == group])]
    return lines


def _aware(rows: pd.DataFrame, cond: str) -> pd.Series | None:
    """The straggler-aware baseline of one group and condition: its newest ``full-aware`` run,
    or without a straggler its plain full pipeline (the same plan there)."""
    aware = _baseline(rows, "full-aware")
    if aware is None and cond == NO_STRAGGLER:
        aware = _baseline(rows, "full")
    return aware


def _split(rows: pd.DataFrame) -> list[str]:
    """Each schedule's gain against the straggler-aware full pipeline, what the plain full
    pipeline adds to it, and, for the skipping schedules, fewer stages against routing."""
    out = []
    for cond, sched in rows[rows["schedule"] == "full-aware"].groupby("condition", sort=False):
        r = sched.iloc[0]
        if cond == NO_STRAGGLER:  # one plan twice: their ratio is the runs' spread
            out.append(
                f"- straggler-aware full pipeline ({cond}): the plain full pipeline's plan, so "
                f"plain full ÷ it = {_times(r['gain'])} is run-to-run spread, not a gain."
            )
            continue
        out.append(
            f"- straggler-aware full pipeline ({cond}): plain full ÷ it = {_times(r['gain'])}: "
            "what leaving the straggler out gains before any stage is skipped."
        )
    for (schedule, skip), sched in rows[rows["schedule"] != "full-aware"].groupby(
        ["schedule", "skip"], sort=False
    ):
        name = f"{schedule} skip={skip:g}"
        for r in sched.itertuples():
            useful = r.useful_tokens_per_s / r.aware_useful_tokens_per_s
            out.append(
                f"- {name} ({r.condition}): iteration-time gain against the straggler-aware full "
                f"pipeline {_times(r.aware_gain)} (against the plain full pipeline "
                f"{_times(r.gain)}), each iteration training a visited share of "
                f"{_g(r.visited_share, '.3f')} of the model; useful tokens/s against it "
                f"{_times(useful)}; loss {_loss(r.aware_loss)} straggler-aware full, "
                f"{_loss(r.loss)} {schedule}"
            )
        without = sched[sched["condition"] == NO_STRAGGLER]
        if without.empty or pd.isna(without["aware_gain"].iloc[0]):
            out.append(f"- {name}: no gain without a straggler, so the gains cannot be split.")
            continue
        fewer = float(without["aware_gain"].iloc[0])
        out.append(
            f"- {name}, gain from visiting fewer stages (no straggler, where both full pipelines "
            f"run one plan): {fewer:.2f}×"
        )
        for r in sched[sched["condition"] != NO_STRAGGLER].itertuples():
            if pd.isna(r.aware_gain):
                continue
            out.append(
                f"- {name}, with the straggler ({r.condition}): of its {r.aware_gain:.2f}× "
                f"against the straggler-aware full pipeline, routing around the straggler "
                f"{r.aware_gain / fewer:.2f}× (= {r.aware_gain:.2f} ÷ {fewer:.2f})"
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
        skip = f" skip={r.skip:g}" if skips(r.schedule) else ""
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
            "## SkipPipe against full pipelines (measured)",
            "",
            "Real runs of the `skippipe` workload under the same emulated links, with and without "
            "a straggler (a node computing slower): the full pipeline (every microbatch through "
            "every stage, GPipe order, a stage's replicas in turn), the straggler-aware full "
            "pipeline (the same, but only through replicas that are not the straggler), random "
            "skip and SkipPipe (both skipping the same share of stages). Iteration is the median "
            "step time. A skipping run reads every token but trains each through part of the "
            "model: its visited share is the share of the (token, block) work its paths ran, "
            "and useful tokens are tokens × that share, so useful tokens/s and J per useful token "
            "compare it with a full pipeline where tokens/s and J/token cannot. That is why "
            "skipping runs are ranked only here, within their condition (by J per useful token, "
            "then useful tokens/s), and not on the leaderboard. Gains are against the "
            "straggler-aware full pipeline: against the plain one, which keeps feeding the "
            "straggler, much of a gain is the baseline's weakness.",
            *real_markdown(real),
            "",
            "Loss here is the mean training loss over a short measured window (a few steps from "
            "the same initialisation): it is not the cost in convergence of skipping stages. "
            f"That comes from {QUALITY}, and from runs to a target loss where the database "
            'holds them (the section "Energy to a target loss": SkipPipe against the '
            "straggler-aware full pipeline at equal quality).",
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
    doc = (
        "SkipPipe against full pipelines (measured, ranked on useful tokens), and simulated "
        "configurations apart"
    )

    def applies(self, context: ReportContext) -> bool:
        """When the report reads the whole database."""
        return context.whole_database

    def render(self, context: ReportContext) -> list[str]:
        """The measured pairs and the simulated table (none when the database holds no such run)."""
        return section(context.db_path)
