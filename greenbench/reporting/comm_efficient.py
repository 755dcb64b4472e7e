"""Communication-efficient data parallelism: what each method (`method_of`) moves per step, how
long a step takes on each link, what a token costs, and what reaching a target loss costs.

Two readers, one per question, both over stored runs only:

* **per step** (`read_methods`): the ``comm-efficient`` workload's runs, one row per (device
  type, rank count, link, method), from the newest ok run of each: medians over its repeats of
  the bytes a rank moves per step (its ``comm_records`` bytes in the window ÷ the window's steps,
  averaged over the ranks), the step time (the window's seconds ÷ its steps), the share of the
  window a rank waited for the others (``wait_s``) and J/token with its energy label. Each row
  is set against DDP of the same rank count, link and device type (`against_ddp`): ``bytes_fewer``
  (DDP's bytes ÷ the method's: ×N fewer) and ``step_ratio`` (the method's step time ÷ DDP's),
  with a verdict on the step times over the repeats (`compare`, "cannot tell" included).
* **to a target** (`read_targets`): the ``convergence`` runs of strategy ddp evaluated every
  `EVAL_EVERY` steps (a whole period of local SGD and DiLoCo, so they are judged where their
  replicas agree), pooled over seeds exactly as the to-target section pools them
  (`greenbench.reporting.to_target`), each configuration named by its method. A method whose
  seeds did not reach the target stays, with each seed's best loss and the energy its budget
  spent (`budget_j`), never a figure it did not reach.

Pure functions (`repeat_figures`, `method_table`, `against_ddp`, `target_methods`) compute from
frames, so the report, the dashboard and the tests get the same figures.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from greenbench.config import section_settings, setting_of
from greenbench.distributed.link import EmulatedLink
from greenbench.errors import SpecError
from greenbench.reporting.repeats import newest_runs, read_repeats
from greenbench.reporting.target_findings import Verdict, compare
from greenbench.reporting.target_rows import target_rows
from greenbench.reporting.to_target import (
    Spread,
    not_reached,
    number,
    seed_rows,
    settings_of,
    target_board,
)
from greenbench.settings import SCHEMA
from greenbench.settings.target import EvalSettings
from greenbench.store import read_frame
from greenbench.store.views import TABLE_NAMES
from greenbench.strategies.ddp_settings import DDPSettings

WORKLOAD = "comm-efficient"
CONVERGENCE = "convergence"
#: the evaluation cadence of the convergence suite's communication-efficient entries: a whole
#: period (H = 16) of local SGD and DiLoCo, DDP and PowerSGD at the same cadence
EVAL_EVERY = 16
#: what the host's own transport (no emulated link) is called
OWN_TRANSPORT = "own transport"
DDP = "DDP"

EVERY = setting_of(EvalSettings, "every")

#: the order methods are listed in: DDP, compression, infrequent synchronisation, staleness
FAMILIES = (DDP, "bf16", "fp16", "PowerSGD", "local SGD", "DiLoCo", "staleness")

COLUMNS = [
    "run_id", "config_key", "config", "workload", "strategy", "nproc", "device_type",
    "started_at", "repeat", "seconds", "tokens", "step_times_s", "joules_per_token",
    "energy_source", "energy_measured",
]  # fmt: skip
#: a method row's figures (medians over the newest run's repeats)
MEDIANS = ("bytes_per_step", "step_s", "wait_share", "joules_per_token")
#: one row per rank and repeat: what it moved and waited, over every op and dim
COMM_SQL = (
    "SELECT run_id, repeat, rank, sum(bytes) AS bytes, sum(seconds) AS comm_s,"
    " sum(wait_s) AS wait_s FROM comm_records WHERE list_contains(?::VARCHAR[], run_id)"
    " GROUP BY run_id, repeat, rank"
)
COMM_COLUMNS = ["run_id", "repeat", "rank", "bytes", "comm_s", "wait_s"]


def _get(settings: Mapping[str, Any], field: Any) -> Any:
    value = settings.get(field.key)
    return field.default if value is None else value


def method_of(settings: Mapping[str, Any]) -> str:
    """A DDP run's method from its ``ddp`` settings: "DDP", "bf16", "fp16", "PowerSGD r=4",
    "local SGD H=16", "DiLoCo H=16" or "staleness 1" (`DDPSettings.method`; settings left at
    their default are plain DDP)."""
    fields = {s.name: _get(settings, s) for s in section_settings(DDPSettings)}
    return DDPSettings(**fields).method or DDP


def method_order(method: str) -> tuple[int, float, str]:
    """Where ``method`` is listed: by family (`FAMILIES`), then by its number (rank, period)."""
    family = next((i for i, f in enumerate(FAMILIES) if method.startswith(f)), len(FAMILIES))
    found = re.search(r"(\d+(?:\.\d+)?)\s*$", method)
    return family, float(found.group(1)) if found else 0.0, method


def link_of(settings: Mapping[str, Any]) -> str:
    """The run's link as `EmulatedLink.label` says it, or `OWN_TRANSPORT` without one."""
    try:
        label = EmulatedLink.of(SCHEMA.config(dict(settings))).label()
    except (SpecError, TypeError, ValueError):  # settings this version cannot read
        return OWN_TRANSPORT
    return label or OWN_TRANSPORT


def _steps(step_times: Any) -> int:
    if isinstance(step_times, str):
        try:
            step_times = json.loads(step_times)
        except ValueError:
            return 0
    try:
        return len(step_times)
    except TypeError:
        return 0


# ------------------------------------------------------------------------------ per step


def read_comm(db_path: str | Path, run_ids: list[str]) -> pd.DataFrame:
    """Per run, repeat and rank (`COMM_COLUMNS`): the bytes its calls moved, the seconds it was
    blocked in them and of those the seconds it waited, over every op and dimension; empty
    where the database keeps no records (a schema from before them)."""
    if not run_ids or "comm_records" not in set(read_frame(db_path, TABLE_NAMES)["table_name"]):
        return pd.DataFrame(columns=COMM_COLUMNS)
    return read_frame(db_path, COMM_SQL, [[str(r) for r in run_ids]])


def repeat_figures(rows: pd.DataFrame, comm: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (one per repeat) with ``steps`` (the window's, from ``step_times_s``),
    ``bytes_per_step`` (each rank's bytes ÷ steps, averaged over the ranks), ``step_s`` (seconds
    ÷ steps) and ``wait_share`` (each rank's waiting ÷ the window's seconds, averaged over the
    ranks); a repeat without records or steps has them unknown."""
    per_repeat = (
        comm.groupby(["run_id", "repeat"])
        .agg(bytes=("bytes", "mean"), wait_s=("wait_s", "mean"))
        .reset_index()
        if len(comm)
        else pd.DataFrame(columns=["run_id", "repeat", "bytes", "wait_s"])
    )
    out = rows.reset_index(drop=True).merge(
        per_repeat.astype({"repeat": int}), on=["run_id", "repeat"], how="left"
    )
    out["steps"] = out["step_times_s"].map(_steps)
    steps = out["steps"].where(out["steps"] > 0)
    seconds = pd.to_numeric(out["seconds"], errors="coerce")
    out["step_s"] = seconds / steps
    out["bytes_per_step"] = pd.to_numeric(out["bytes"], errors="coerce") / steps
    out["wait_share"] = pd.to_numeric(out["wait_s"], errors="coerce") / seconds
    return out.drop(columns=["bytes", "wait_s"])


def method_table(repeats: pd.DataFrame) -> pd.DataFrame:
    """One row per (``device_type``, ``nproc``, ``link``, ``method``) from the repeats with their
    figures (`repeat_figures`) of its newest run: the `MEDIANS`, ``step_times`` (each repeat's,
    for the verdicts), ``repeats``, the energy label and the run id, set against DDP
    (`against_ddp`)."""
    if repeats.empty:
        return pd.DataFrame(columns=["device_type", "nproc", "link", "method", *MEDIANS])
    rows = newest_runs(repeats)
    settings = rows["config"].map(settings_of)
    rows = rows.assign(method=settings.map(method_of), link=settings.map(link_of))
    keys = ["device_type", "nproc", "link", "method"]
    newest = rows.sort_values("started_at").groupby(keys, dropna=False)["run_id"].last()
    rows = rows[rows["run_id"].isin(set(newest))]
    out = []
    for key, g in rows.groupby(keys, dropna=False, sort=False):
        out.append(
            {
                **dict(zip(keys, key, strict=True)),
                **{m: pd.to_numeric(g[m], errors="coerce").median() for m in MEDIANS},
                "step_times": [float(v) for v in g["step_s"] if pd.notna(v)],
                "repeats": len(g),
                "energy": " / ".join(sorted(set(g["energy"]))),
                "energy_measured": bool(g["energy_measured"].astype(bool).all()),
                "run_id": g["run_id"].iloc[-1],
            }
        )
    table = pd.DataFrame(out)
    table["_o"] = table["method"].map(method_order)
    table["_l"] = table["link"] != OWN_TRANSPORT
    table = table.sort_values(["device_type", "nproc", "_l", "link", "_o"]).drop(
        columns=["_o", "_l"]
    )
    return against_ddp(table.reset_index(drop=True))


def step_verdict(a: list[float], b: list[float]) -> Verdict:
    """Step times ``a`` against ``b`` over their repeats (lower is faster): `compare` on the
    medians' intervals, "cannot tell" where a side has one repeat."""
    if len(a) < 2 or len(b) < 2:
        return Verdict("cannot tell", "one repeat has no interval: run more repeats")
    return compare(Spread.of(a), Spread.of(b))


def against_ddp(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with ``bytes_fewer`` (DDP's bytes per step ÷ the row's), ``step_ratio`` (the
    row's step time ÷ DDP's) and ``step_verdict`` (its step times against DDP's, a `Verdict`
    word: less is faster), against DDP of the same device type, rank count and link; unknown
    where that DDP is not stored."""
    keys = ["device_type", "nproc", "link"]
    base = table[table["method"] == DDP].drop_duplicates(keys, keep="last")
    base = base[[*keys, "bytes_per_step", "step_s", "step_times"]].rename(
        columns={"bytes_per_step": "ddp_bytes", "step_s": "ddp_step_s", "step_times": "ddp_times"}
    )
    out = table.merge(base, on=keys, how="left")
    out["bytes_fewer"] = out["ddp_bytes"] / out["bytes_per_step"].where(out["bytes_per_step"] > 0)
    out["step_ratio"] = out["step_s"] / out["ddp_step_s"]
    out["step_verdict"] = [
        step_verdict(a, b)
        if isinstance(b, list)
        else Verdict("cannot tell", "no DDP to set against")
        for a, b in zip(out["step_times"], out["ddp_times"], strict=True)
    ]
    return out.drop(columns=["ddp_times"])


def read_methods(db_path: str | Path, run_ids: set[str] | None = None) -> pd.DataFrame:
    """`method_table` of the ``comm-efficient`` workload's runs in ``db_path`` (of ``run_ids``
    only, where given); empty where it holds none."""
    if not Path(db_path).exists():
        return method_table(pd.DataFrame())
    rows = read_repeats(db_path, COLUMNS)
    rows = rows[rows["workload"] == WORKLOAD]
    if run_ids is not None:
        rows = rows[rows["run_id"].isin(run_ids)]
    if rows.empty:
        return method_table(rows)
    comm = read_comm(db_path, sorted(set(rows["run_id"])))
    return method_table(repeat_figures(rows, comm))


# ------------------------------------------------------------------------------ to a target


def is_method_run(row: pd.Series | Mapping[str, Any]) -> bool:
    """Whether a run to a target is one of the convergence suite's DDP methods (strategy ddp,
    evaluated every `EVAL_EVERY` steps)."""
    if row["workload"] != CONVERGENCE or row["strategy"] != "ddp":
        return False
    return int(_get(settings_of(row["config"]), EVERY)) == EVAL_EVERY


def target_methods(seeds: pd.DataFrame, spent: pd.DataFrame | None = None) -> pd.DataFrame:
    """The methods' runs to a target pooled over seeds (`to_target.target_board` of ``seeds``,
    `to_target.seed_rows` of such runs), each row with its ``method``, ``per_seed`` (each
    seed's energy to target, or "not reached (best …)") and ``budget_j``: the median over seeds
    of the energy a seed spent in all (``spent``: ``run_id``, ``energy_j`` per repeat), which is
    where a method that did not reach is drawn, at least what reaching would have cost."""
    board = target_board(seeds)
    if board.empty:
        return board.assign(method=[], per_seed=[], budget_j=[])
    spent_by_run = (
        pd.to_numeric(spent["energy_j"], errors="coerce").groupby(spent["run_id"]).median()
        if spent is not None and len(spent)
        else pd.Series(dtype=float)
    )
    per_seed, budget = [], []
    for _, r in board.iterrows():
        runs = seeds[seeds["run_id"].isin(r["run_ids"])]
        per_seed.append("; ".join(_seed_text(s) for _, s in runs.iterrows()))
        values = [spent_by_run.get(run_id, math.nan) for run_id in r["run_ids"]]
        budget.append(float(pd.Series(values, dtype=float).median()))
    board = board.assign(
        method=board["settings"].map(method_of), per_seed=per_seed, budget_j=budget
    )
    board["_o"] = board["method"].map(method_order)
    return board.sort_values(["devices", "energy", "_o"]).drop(columns="_o").reset_index(drop=True)


def _seed_text(seed: pd.Series) -> str:
    name = f"seed {seed['seed']}" if seed["seed"] is not None and pd.notna(seed["seed"]) else "seed"
    if seed["reached"] and math.isfinite(float(seed["energy_to_target_j"])):
        return f"{name}: {number(float(seed['energy_to_target_j']), 'J')}"
    if seed["reached"]:
        return f"{name}: reached (energy unknown)"
    return f"{name}: {not_reached(float(seed['best_not_reached']))}"


def read_targets(db_path: str | Path, run_ids: set[str] | None = None) -> pd.DataFrame:
    """`target_methods` of the convergence suite's DDP methods in ``db_path`` (of ``run_ids``
    only, where given); empty where none trained to a target."""
    rows = target_rows(db_path)
    if run_ids is not None:
        rows = rows[rows["run_id"].isin(run_ids)]
    if not rows.empty:
        rows = rows[[is_method_run(r) for _, r in rows.iterrows()]]
    if rows.empty:
        return target_methods(seed_rows(rows))
    spent = read_repeats(db_path, ["run_id", "repeat", "energy_j"])
    spent = spent[spent["run_id"].isin(set(rows["run_id"]))]
    return target_methods(seed_rows(rows), spent)


def with_bytes(targets: pd.DataFrame, methods: pd.DataFrame) -> pd.DataFrame:
    """``targets`` with ``bytes_per_step``: the method's bytes per step and rank measured by
    the comm-efficient workload at the same rank count, on the host's own transport where it
    ran there, else over a link (a link delays bytes, it does not change them); unknown where
    that workload did not run it."""
    if targets.empty:
        return targets.assign(bytes_per_step=[])
    if methods.empty:
        return targets.assign(bytes_per_step=math.nan)
    own = (
        methods.assign(_own=methods["link"] == OWN_TRANSPORT)
        .sort_values("_own", kind="stable")
        .drop_duplicates(["nproc", "method"], keep="last")
        .rename(columns={"nproc": "devices"})[["devices", "method", "bytes_per_step"]]
        .astype({"devices": int})
    )
    return targets.astype({"devices": int}).merge(own, on=["devices", "method"], how="left")
