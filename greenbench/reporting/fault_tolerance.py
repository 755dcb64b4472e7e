"""Fault-tolerant training: what a failure cost each checkpoint interval, what its checkpoints
cost, and the interval Young's and Daly's models call optimum from those measured costs.

The reader (`read_intervals`) takes every stored ok run with fault figures (a checkpointed run,
one with an injected failure: `greenbench.results.RepeatResult`'s ``failures`` … ``ckpt_bytes``),
the newest run of each configuration, each of its repeats one sample (a checkpointed run has
one; ``--seeds`` gives an interval several runs, pooled as the other sections pool seeds).

Per sample (`sample_figures`): the energy lost per failure (``energy_lost_j`` ÷ ``failures``)
and its parts, the work redone and the restart, in joules and seconds; goodput; the
checkpoints' count, seconds, joules and bytes and δ, the seconds training waited per checkpoint;
the seconds a measured step takes without them (the window's seconds less the checkpoints', the
redone work's and the restarts', ÷ its measured steps); the overhead of fault tolerance, its
checkpoints and its failures together, in joules and as a share of the window's seconds.

Per interval (`interval_table`): those figures' medians over the samples with their intervals,
in groups of configurations that differ only in ``ckpt.every`` (and the seed) on one kind of
device under one energy label. Per group (`group_optimum`): the `young_daly.Optimum` of its
pooled measurements: δ = Σ checkpoint seconds ÷ Σ checkpoints, M = the median seconds per
failure of its runs (the rate the injected failures set, not a machine's), R = Σ restart
seconds ÷ Σ failures, and the median step time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from greenbench.config import setting_of
from greenbench.reporting.repeats import newest_runs, read_repeats
from greenbench.reporting.target_findings import same_but
from greenbench.reporting.to_target import Spread, settings_of
from greenbench.reporting.young_daly import Optimum
from greenbench.settings.fault import CkptSettings, FaultSettings
from greenbench.settings.run import TrainSettings
from greenbench.store import read_frame
from greenbench.store.views import TABLE_NAMES

EVERY = setting_of(CkptSettings, "every")
MODE = setting_of(CkptSettings, "mode")
KILL = setting_of(FaultSettings, "kill_rank")
STEPS = setting_of(TrainSettings, "steps")

#: the fault figures of a repeat (schema version 14 on)
FAULT_COLUMNS = [
    "failures", "tokens_trained", "goodput", "redone_s", "redone_j", "restart_s", "restart_j",
    "energy_lost_j", "ckpt_count", "ckpt_s", "ckpt_j", "ckpt_bytes",
]  # fmt: skip
COLUMNS = [
    "run_id", "config_key", "config", "config_name", "workload", "strategy", "nproc",
    "device_type", "started_at", "repeat", "seconds", "tokens", "energy_j", "energy_source",
    "energy_measured", "step_time_p50_s", *FAULT_COLUMNS,
]  # fmt: skip
#: the figures of an interval: a median with its interval over the samples (``X``, ``X_low``,
#: ``X_high``, ``X_n``, and ``X_values`` for the verdicts)
SPREADS = ("lost_per_failure_j", "goodput", "overhead_j", "waste")
#: the figures of an interval given as medians over its samples
MEDIANS = (
    "redone_per_failure_j", "restart_per_failure_j", "redone_per_failure_s",
    "restart_per_failure_s", "redone_steps_per_failure", "ckpt_count", "ckpt_s", "ckpt_j",
    "ckpt_bytes", "delta_s", "step_s", "seconds", "energy_j", "mtbf_s", "overhead_s",
)  # fmt: skip
#: one row per event of the runs named (schema version 14 on)
EVENTS_SQL = (
    "SELECT run_id, repeat, seq, kind, step, rank, t_s, seconds, joules, tokens, bytes, note"
    " FROM run_events WHERE list_contains(?::VARCHAR[], run_id) ORDER BY run_id, repeat, seq"
)
EVENT_COLUMNS = [
    "run_id", "repeat", "seq", "kind", "step", "rank", "t_s", "seconds", "joules", "tokens",
    "bytes", "note",
]  # fmt: skip


def _get(settings: Mapping[str, Any], field: Any) -> Any:
    value = settings.get(field.key)
    return field.default if value is None else value


def _num(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def _per(a: Any, b: Any) -> float:
    """``a`` ÷ ``b``; NaN where either is unknown or ``b`` is not positive."""
    x, y = _num(a), _num(b)
    return x / y if y > 0 and not math.isnan(x) else math.nan


def _sum(*values: Any) -> float:
    """The sum, an unknown part counting as none (a run without checkpoints has none of their
    seconds); NaN where every part is unknown."""
    xs = [_num(v) for v in values]
    known = [x for x in xs if not math.isnan(x)]
    return sum(known) if known else math.nan


def sample_figures(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (one per repeat, `COLUMNS` and an ``energy`` label) with their settings
    (``every``: the checkpoint interval in measured steps, -1 without; ``mode``, ``kill``,
    ``steps``) and the figures of the module docstring."""
    out = rows.reset_index(drop=True).copy()
    settings = out["config"].map(settings_of)
    out["settings"] = settings
    out["every"] = [int(_get(s, EVERY)) for s in settings]
    out["mode"] = [str(_get(s, MODE)) for s in settings]
    out["kill"] = [str(_get(s, KILL)) for s in settings]
    out["steps"] = [int(_get(s, STEPS)) for s in settings]
    lost, redone_j, restart_j, redone_s, restart_s, redone_steps = [], [], [], [], [], []
    delta, step_s, overhead_s, overhead_j, waste, mtbf = [], [], [], [], [], []
    for _, r in out.iterrows():
        failures = r["failures"]
        lost.append(_per(r["energy_lost_j"], failures))
        redone_j.append(_per(r["redone_j"], failures))
        restart_j.append(_per(r["restart_j"], failures))
        redone_s.append(_per(r["redone_s"], failures))
        restart_s.append(_per(r["restart_s"], failures))
        per_step_tokens = _per(r["tokens"], r["steps"])
        redone_tokens = _num(r["tokens_trained"]) - _num(r["tokens"])
        redone_steps.append(_per(_per(redone_tokens, per_step_tokens), failures))
        delta.append(_per(r["ckpt_s"], r["ckpt_count"]))
        spent = _sum(r["ckpt_s"], r["redone_s"], r["restart_s"])
        useful = _num(r["seconds"]) - (0.0 if math.isnan(spent) else spent)
        own = _per(useful, r["steps"])
        step_s.append(own if own > 0 else _num(r["step_time_p50_s"]))
        overhead_s.append(spent)
        overhead_j.append(_sum(r["ckpt_j"], r["energy_lost_j"]))
        waste.append(_per(spent, r["seconds"]))
        mtbf.append(_per(r["seconds"], failures))
    return out.assign(
        lost_per_failure_j=lost, redone_per_failure_j=redone_j, restart_per_failure_j=restart_j,
        redone_per_failure_s=redone_s, restart_per_failure_s=restart_s,
        redone_steps_per_failure=redone_steps, delta_s=delta, step_s=step_s,
        overhead_s=overhead_s, overhead_j=overhead_j, waste=waste, mtbf_s=mtbf,
    )  # fmt: skip


#: a figure in an event's note (``2.81``, ``12``)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
#: a run name's checkpoint words (`RunSpec.name`): a group's runs differ in them
_CKPT_WORDS = re.compile(r" ckpt/\d+(?: async)?")


def group_name(config_name: str) -> str:
    """A group's name: its runs' name without the interval that tells them apart."""
    return _CKPT_WORDS.sub("", config_name)


def group_of(row: pd.Series) -> str:
    """The group a sample is compared within: its configuration but ``ckpt.every`` and the
    seed, its kind of device and its energy label (`target_findings.same_but`)."""
    return same_but(row, lambda key: key == EVERY.key)


def _spread_cells(name: str, values: list[float]) -> dict[str, Any]:
    s = Spread.of(values)
    return {
        name: s.median, f"{name}_low": s.low, f"{name}_high": s.high, f"{name}_n": s.n,
        f"{name}_values": [v for v in values if not math.isnan(v)],
    }  # fmt: skip


def interval_table(samples: pd.DataFrame) -> pd.DataFrame:
    """One row per group and checkpoint interval (``group``, ``every``, ``mode``, ``kill``,
    ``strategy``, ``nproc``, ``device_type``, ``energy``, ``runs``, ``failures`` summed, the
    `SPREADS` with their intervals and the `MEDIANS`), ordered by group then interval."""
    if samples.empty:
        return pd.DataFrame(columns=["group", "every", *SPREADS, *MEDIANS])
    samples = samples.assign(group=[group_of(r) for _, r in samples.iterrows()])
    out = []
    for (group, every), g in samples.groupby(["group", "every"], sort=False):
        first = g.iloc[-1]
        item: dict[str, Any] = {
            "group": group, "every": int(every), "mode": first["mode"], "kill": first["kill"],
            "workload": first["workload"], "strategy": first["strategy"],
            "nproc": first["nproc"], "device_type": first["device_type"],
            "config_name": group_name(first["config_name"]), "energy": first["energy"],
            "energy_measured": bool(g["energy_measured"].astype(bool).all()),
            "runs": g["run_id"].nunique(), "samples": len(g),
            "failures": int(pd.to_numeric(g["failures"], errors="coerce").fillna(0).sum()),
            "run_ids": sorted(set(g["run_id"])),
        }  # fmt: skip
        for name in SPREADS:
            item |= _spread_cells(name, [_num(v) for v in g[name]])
        for name in MEDIANS:
            item[name] = pd.to_numeric(g[name], errors="coerce").median()
        item["_ckpt_s_sum"] = pd.to_numeric(g["ckpt_s"], errors="coerce").sum()
        item["_ckpt_count_sum"] = pd.to_numeric(g["ckpt_count"], errors="coerce").sum()
        item["_restart_s_sum"] = pd.to_numeric(g["restart_s"], errors="coerce").sum()
        out.append(item)
    table = pd.DataFrame(out)
    table["_first"] = table.groupby("group", sort=False).ngroup()
    return table.sort_values(["_first", "every"]).drop(columns="_first").reset_index(drop=True)


def group_optimum(rows: pd.DataFrame) -> Optimum | None:
    """The `young_daly.Optimum` of one group's intervals (rows of `interval_table`), from its
    measurements pooled (module docstring); None where they hold no checkpoint or failure."""
    checkpoints = float(rows["_ckpt_count_sum"].sum())
    failures = float(rows["failures"].sum())
    mtbf = pd.to_numeric(rows["mtbf_s"], errors="coerce").median()
    step = pd.to_numeric(rows["step_s"], errors="coerce").median()
    if not (checkpoints > 0 and failures > 0) or pd.isna(mtbf) or pd.isna(step) or step <= 0:
        return None
    return Optimum(
        delta_s=float(rows["_ckpt_s_sum"].sum()) / checkpoints,
        mtbf_s=float(mtbf),
        restart_s=float(rows["_restart_s_sum"].sum()) / failures,
        step_s=float(step),
    )


def read_events(db_path: str | Path, run_ids: list[str]) -> pd.DataFrame:
    """The events of ``run_ids`` (`EVENT_COLUMNS`), in order; empty where the database keeps
    none (a schema from before them)."""
    if not run_ids or "run_events" not in set(read_frame(db_path, TABLE_NAMES)["table_name"]):
        return pd.DataFrame(columns=EVENT_COLUMNS)
    return read_frame(db_path, EVENTS_SQL, [[str(r) for r in run_ids]])


def event_notes(events: pd.DataFrame) -> dict[str, list[str]]:
    """Each event kind's distinct notes (what its figures estimate or leave out), in order;
    notes that differ only in their figures (a restart's seconds, a run's steps) are one, its
    figures written "…"."""
    notes: dict[str, list[str]] = {}
    events = events.assign(
        note=[_NUMBER.sub("…", n) if isinstance(n, str) else n for n in events["note"]]
    )
    for kind, note in zip(events["kind"], events["note"], strict=True):
        if isinstance(note, str) and note.strip() and note not in notes.get(kind, []):
            notes.setdefault(str(kind), []).append(note)
    return notes


def read_samples(db_path: str | Path, run_ids: set[str] | None = None) -> pd.DataFrame:
    """`sample_figures` of every stored fault-tolerant run's newest configuration (of
    ``run_ids`` only, where given); empty where the database holds none."""
    if not Path(db_path).exists():
        return pd.DataFrame(columns=COLUMNS)
    rows = read_repeats(db_path, COLUMNS)
    if run_ids is not None:
        rows = rows[rows["run_id"].isin(run_ids)]
    known = (
        pd.to_numeric(rows["failures"], errors="coerce").notna()
        | pd.to_numeric(rows["ckpt_count"], errors="coerce").notna()
    )
    rows = rows[known]
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    return sample_figures(newest_runs(rows))


def read_intervals(db_path: str | Path, run_ids: set[str] | None = None) -> pd.DataFrame:
    """`interval_table` of the stored fault-tolerant runs (module docstring)."""
    return interval_table(read_samples(db_path, run_ids))


__all__ = [
    "group_optimum",
    "interval_table",
    "read_events",
    "read_intervals",
    "read_samples",
    "sample_figures",
]
