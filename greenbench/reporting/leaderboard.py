"""Pure computations behind the dashboard: leaderboard rows, Pareto fronts, history (per commit,
branch, label or day: `greenbench.reporting.axes`).

Inputs are plain DataFrames with one row per measured repeat (the `runs` table joined with the
`results` table, as :data:`REPEAT_COLUMNS` lists); nothing here touches DuckDB or Streamlit, so
`report` and `compare` can reuse it and the tests need no database. Simulated runs (energy
source ``model``, or ``simulated`` true where the rows carry that column) are never on the
leaderboard: `without_simulated` drops them before anything is pooled or ranked; the report lists
them in a section of their own. Nor is a user's own measurement (``greenbench.measure``'s own
loop, ``greenbench measure -- CMD``'s whole process): it is not a training window of a greenbench
workload (a whole process includes start-up and whatever the command did), so
`own_measurement_mask` tells those rows and `training_rows` leaves them out with the simulated;
the report gives them a table of their own.

What is not comparable is never ranked together. A SkipPipe run that skips (`skipped_fraction`:
its ``skippipe.skip``, the share of the stages each token skips) trains only part of the model
per token, so its tokens/s and J/token are not a full-model run's: it is not on the leaderboard
at all (`leaderboard` leaves it out, `skipping_board` pools it alone), and is ranked only within
its own question, against its full pipelines and on useful tokens (the SkipPipe report section);
`comparable_front` still leaves a row marked ``partial_model`` off every front. Fronts are drawn
within one workload and energy source (`comparable_front`): a workload's tokens are not another's.

Every leaderboard and history row carries the trust model (`greenbench.vocabulary.trust`) of the
repeats it pools: how many of its runs were ``contended`` (and the most busy cores and other
greenbench processes any saw), how many repeats had an unreliable idle baseline (the row's net
J/token is then unknown, and a negative net figure, from a database never migrated, counts as one),
whether its MFU peak agrees with its machine's (``peak_consistent``, where the rows say), the
``interval`` its repeat count allows (a 95 % CI from 6 repeats, else the min–max range, which the
``_ci_low``/``_ci_high`` columns then hold), and ``trust``: the markers every view prints.
Contended rows are marked, not dropped; views let the user filter them.

A row pools the runs of one seed group (`GROUP_KEYS`: a configuration run with several seeds,
on the same hardware, with the same kind of energy figure): where it holds several seeds, each
run's median is one sample of its medians and intervals, and ``n_seeds`` says how many
(`greenbench.reporting.seeds`); with one seed, its repeats are, as before.

Why our own Pareto front instead of a library's: the dominance rule has to be exactly "≤ on
every axis and < on at least one" (a point tied on one axis with a strictly better point is
dropped), NaNs must drop out rather than poison the comparison, and a sort-and-sweep over two
axes is a dozen lines.
"""

from __future__ import annotations

import json
import math
import re
from typing import Literal

import numpy as np
import pandas as pd

from greenbench.reporting import axes
from greenbench.reporting.seeds import SEED_GROUP, n_seeds, samples, with_seed_group
from greenbench.settings import SCHEMA
from greenbench.stats import median_ci
from greenbench.strategies.skippipe.settings import skips
from greenbench.vocabulary import (
    LEADERBOARD_METRICS,
    OWN_MEASUREMENT_KINDS,
    POOLED_OVER_SEEDS,
    Better,
    Metric,
    is_simulated,
)
from greenbench.vocabulary import METRICS as ALL_METRICS
from greenbench.vocabulary.trust import Trust, missing

#: metrics aggregated per configuration (median with a CI; peak memory: the maximum)
METRICS: dict[str, Metric] = {name: ALL_METRICS[name] for name in LEADERBOARD_METRICS}

#: columns that describe a configuration (constant within a config_key, and a seed group)
CONFIG_COLUMNS = (
    "workload",
    "config_name",
    "model_family",
    "model_size",
    "strategy",
    "layout",
    "device",
    "device_type",
    "devices",
    "precision",
    "seq_len",
    "lengths",
    "peak_flops_source",
)

#: metrics a database older than them lacks (MFU under the causal convention, schema version
#: 12 on): the dashboard and the report select them where present, and rows without them read
#: as unknown
LATER_METRICS = ("mfu_causal",)

#: what one repeat row must carry (the dashboard's query selects exactly these)
REPEAT_COLUMNS = (
    "run_id",
    "suite",
    "config_key",
    *(c for c in CONFIG_COLUMNS if c != "devices"),
    "nproc",
    "nnodes",
    "git_sha",
    "started_at",
    "repeat",
    "tokens",
    "energy_source",
    "energy_measured",
    "co2_g",
    *(m for m in METRICS if m not in ("co2_g_per_mtok", *LATER_METRICS)),
)

#: what pooling over seeds reads, where the rows carry it (a database older than seed groups
#: lacks it: each configuration is a group of its own): the dashboard and the report select it
POOL_COLUMNS = (SEED_GROUP,)

#: what keeps versions and history points apart beyond the git sha (`history`, the latest
#: version of `leaderboard`), where the rows carry it (the git branch: schema version 16 on;
#: rows without one read as unknown): the dashboard and the report select these when present
HISTORY_COLUMNS = ("label", "git_branch")

#: what the trust model reads, where the rows carry it (a database older than a column, or rows
#: built without it, read as unknown): the dashboard and the report select these when present
TRUST_COLUMNS = (
    "contended", "others_busy_cores", "other_greenbench", "simulated", "idle_note",
    "peak_consistent", "peak_note",
)  # fmt: skip
#: what a leaderboard or history row says of its trust (module docstring)
TRUST_FIELDS = (
    "contended", "n_contended_runs", "others_busy_cores", "other_greenbench",
    "n_idle_unreliable", "peak_consistent", "peak_note", "interval", "trust",
)  # fmt: skip

#: the ``strategy`` of a user's own measurement (`greenbench.vocabulary.OWN_MEASUREMENT_KINDS`)
OWN_MEASUREMENT_STRATEGIES = tuple(OWN_MEASUREMENT_KINDS)
#: their workload names' prefixes (``loop/NAME``, ``process/NAME``), read where rows lack a strategy
OWN_MEASUREMENT_PREFIXES = ("loop/", "process/")

#: one leaderboard row per seed group (the settings but the seed, hardware, kind of energy figure)
GROUP_KEYS = POOLED_OVER_SEEDS


def pareto_front(df: pd.DataFrame, x: str, y: str, x_better: Better, y_better: Better) -> pd.Series:
    """Boolean mask (aligned with ``df.index``) of the points no other point dominates.

    Point a dominates b when a is at least as good as b on both axes and strictly better on
    at least one; so of two points tied on one axis only the better on the other stays, while
    exact duplicates both stay (neither dominates the other). Rows with NaN on either axis are
    never on the front and dominate nothing.
    """
    for better in (x_better, y_better):
        if better not in ("max", "min"):
            raise ValueError(f"better must be 'max' or 'min', not {better!r}")
    xs = df[x].to_numpy(dtype=float) * (-1.0 if x_better == "max" else 1.0)
    ys = df[y].to_numpy(dtype=float) * (-1.0 if y_better == "max" else 1.0)
    on_front = np.zeros(len(df), dtype=bool)
    valid = np.flatnonzero(~(np.isnan(xs) | np.isnan(ys)))
    # Both axes are now "smaller is better". Sweep x ascending; within one x value only the
    # smallest y can survive, and only if it beats every y seen at strictly smaller x.
    order = valid[np.lexsort((ys[valid], xs[valid]))]
    best_y = math.inf
    i = 0
    while i < len(order):
        j = i
        while j < len(order) and xs[order[j]] == xs[order[i]]:
            j += 1
        y_min = ys[order[i]]  # sorted by y within equal x
        if y_min < best_y:
            for k in order[i:j]:
                on_front[k] = ys[k] == y_min
            best_y = y_min
        i = j
    return pd.Series(on_front, index=df.index, name="pareto")


def pareto_front_by(
    df: pd.DataFrame, x: str, y: str, x_better: Better, y_better: Better, by: str
) -> pd.Series:
    """:func:`pareto_front` computed separately within each value of column ``by``.

    The dashboard uses it to keep measured and estimated energy on separate fronts: an
    estimate must never knock a measurement off the front, nor the other way round.
    """
    mask = pd.Series(False, index=df.index, name="pareto")
    for _, part in df.groupby(by, dropna=False, sort=False):
        mask.loc[part.index] = pareto_front(part, x, y, x_better, y_better)
    return mask


def comparable_front(
    board: pd.DataFrame,
    x: str,
    y: str,
    x_better: Better,
    y_better: Better,
    by: tuple[str, ...] = ("workload", "energy_source"),
) -> pd.Series:
    """:func:`pareto_front` within each value of the ``by`` columns (one workload, one kind of
    energy figure), with partial-model rows (`partial_model_mask`) never on a front: their
    J/token pays for part of the model, so they must not knock a full-model run off it."""
    mask = pd.Series(False, index=board.index, name="pareto")
    full = board[~partial_model_mask(board)] if len(board) else board
    keys = [c for c in by if c in full]
    if full.empty:
        return mask
    if not keys:
        mask.loc[full.index] = pareto_front(full, x, y, x_better, y_better)
        return mask
    for _, part in full.groupby(keys, dropna=False, sort=False):
        mask.loc[part.index] = pareto_front(part, x, y, x_better, y_better)
    return mask


def simulated_mask(rows: pd.DataFrame) -> pd.Series:
    """Which repeat rows come from simulated runs (`greenbench.vocabulary.is_simulated`)."""
    flags = rows["simulated"] if "simulated" in rows else pd.Series(None, index=rows.index)
    sources = rows["energy_source"] if "energy_source" in rows else pd.Series("", index=rows.index)
    return pd.Series(
        [is_simulated(s, f) for s, f in zip(sources, flags, strict=True)],
        index=rows.index,
        dtype=bool,
    )


def without_simulated(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` less those of simulated runs: measurements only."""
    return rows[~simulated_mask(rows)] if len(rows) else rows


def own_measurement_mask(rows: pd.DataFrame) -> pd.Series:
    """Which rows (repeat or leaderboard rows) are a user's own measurement: an own loop
    (``greenbench.measure``) or a whole process (``greenbench measure -- CMD``), told by their
    ``strategy`` (`OWN_MEASUREMENT_STRATEGIES`), or, where rows carry no strategy, by their
    workload's ``loop/`` or ``process/`` prefix. They are not training windows of greenbench's
    workloads, so they are never ranked beside them (`training_rows`)."""
    if "strategy" in rows:
        own = rows["strategy"].isin(OWN_MEASUREMENT_STRATEGIES)
    elif "workload" in rows:
        own = rows["workload"].astype(str).str.startswith(OWN_MEASUREMENT_PREFIXES)
    else:
        own = pd.Series(False, index=rows.index)
    return pd.Series(own.to_numpy(dtype=bool), index=rows.index, name="own_measurement")


def training_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` less simulated runs (`without_simulated`) and a user's own measurements
    (`own_measurement_mask`): what the training leaderboard and Pareto fronts rank."""
    if not len(rows):
        return rows
    rows = without_simulated(rows)
    return rows[~own_measurement_mask(rows)]


def _flags(values: pd.Series) -> list[bool | None]:
    """True, False or None (NULL, NaN, NA: unknown) for each value of a boolean column."""
    return [None if missing(v) else bool(v) for v in values]


def unreliable_idle(rows: pd.DataFrame) -> pd.Series:
    """Which repeats have an unreliable idle baseline: a stored ``idle_note``, or a negative net
    figure (stored before net energy was checked, in a database never migrated)."""
    notes = rows["idle_note"] if "idle_note" in rows else pd.Series("", index=rows.index)
    noted = pd.Series([not missing(n) and bool(str(n)) for n in notes], index=rows.index)
    negative = pd.Series(False, index=rows.index)
    for column in ("net_joules_per_token", "energy_net_j"):
        if column in rows:
            negative |= pd.to_numeric(rows[column], errors="coerce").fillna(0.0) < 0
    return noted | negative


def trust_fields(group: pd.DataFrame) -> dict[str, object]:
    """The trust of the repeats one row pools (module docstring), without ``interval`` and
    ``trust``, which need the whole row (`with_trust`)."""
    runs = group.drop_duplicates("run_id")
    flags = _flags(runs["contended"]) if "contended" in runs else []
    n_contended = sum(f is True for f in flags)
    contended = True if n_contended else False if any(f is False for f in flags) else None

    def most(column: str) -> float:
        values = pd.to_numeric(runs[column], errors="coerce") if column in runs else None
        return math.nan if values is None or values.isna().all() else float(values.max())

    peaks = _flags(runs["peak_consistent"]) if "peak_consistent" in runs else []
    consistent = False if False in peaks else True if True in peaks else None
    notes = runs["peak_note"] if "peak_note" in runs else pd.Series(dtype=object)
    note = next((str(n) for n in notes if not missing(n) and str(n)), "")
    return {
        "contended": contended,
        "n_contended_runs": n_contended,
        "others_busy_cores": most("others_busy_cores"),
        "other_greenbench": most("other_greenbench"),
        "n_idle_unreliable": int(
            group["idle_unreliable"].sum()
            if "idle_unreliable" in group
            else unreliable_idle(group).sum()
        ),
        "peak_consistent": consistent,
        "peak_note": note,
    }


def with_trust(row: dict[str, object], n_samples: int | None = None) -> dict[str, object]:
    """``row`` (a pooled row with ``n_repeats``, ``n_runs`` and `trust_fields`) with its
    ``interval`` name and ``trust`` markers; the interval is that of ``n_samples`` (a row pooled
    over seeds: its runs), else of its repeats."""
    trust = Trust.of(row, n_repeats=n_samples)
    return row | {"interval": trust.interval.name, "trust": trust.mark()}


def with_derived(rows: pd.DataFrame) -> pd.DataFrame:
    """Add per-repeat derived columns: ``devices``, ``co2_g_per_mtok`` and ``idle_unreliable``
    (`unreliable_idle`); a net energy figure below zero (never stored since net energy is
    checked) reads as unknown."""
    out = rows.copy()
    out["idle_unreliable"] = unreliable_idle(out)
    for column in ("net_joules_per_token", "energy_net_j"):
        if column in out:
            values = pd.to_numeric(out[column], errors="coerce")
            out[column] = values.where(~(values < 0))
    out["devices"] = out["nproc"] * out["nnodes"]
    tokens = out["tokens"].astype(float).where(out["tokens"] > 0)
    out["co2_g_per_mtok"] = out["co2_g"].astype(float) / tokens * 1e6
    out["git_sha"] = out["git_sha"].fillna("unknown")
    return out


def _summary(values: pd.Series | np.ndarray) -> tuple[float, float, float]:
    xs = pd.Series(values, dtype=float).dropna()
    if xs.empty:
        return math.nan, math.nan, math.nan
    return median_ci(xs.tolist())


def _latest_version_only(rows: pd.DataFrame) -> pd.DataFrame:
    """Keep, per configuration and energy source, the repeats of its newest version: the git
    sha and the label of its most recent run. Runs of one sha under two labels, or runs
    started outside a checkout (sha "unknown") under two labels, are two versions, never pooled
    (rows without a ``label`` column: by sha alone)."""
    version = rows["git_sha"].astype(str)
    if "label" in rows:
        version = version + "\x00" + axes.series_values(rows)
    rows = rows.assign(_version=version)
    latest = rows.sort_values("started_at").groupby(list(GROUP_KEYS), dropna=False).tail(1)
    keep = latest[[*GROUP_KEYS, "_version"]]
    return rows.merge(keep, on=[*GROUP_KEYS, "_version"], how="inner").drop(columns="_version")


def leaderboard(
    rows: pd.DataFrame, scope: Literal["latest", "all"] = "latest", confidence: float = 0.95
) -> pd.DataFrame:
    """One row per configuration (its seeds pooled) and energy source: medians, CIs, repeats,
    latest run.

    ``rows`` holds one row per repeat of successful runs (:data:`REPEAT_COLUMNS`, and
    ``seed_group`` where known: `POOL_COLUMNS`). A configuration run with several seeds is one
    row whose medians and CIs take each run's median as one sample (``n_seeds`` of them; the
    module docstring); ``config_key`` is its latest run's. With
    ``scope="latest"`` only the repeats of the configuration's newest version (the git sha and
    label of its most recent run) are pooled (so code changes and differently labelled runs do
    not blur the numbers; :func:`history` shows the rest); ``"all"``
    pools every stored repeat. Measured and estimated energy are never pooled: the energy
    source is part of the row's key. Simulated runs and a user's own measurements are left out
    (`training_rows`). For each metric ``m`` the result has ``m`` (median; for peak memory the
    maximum), ``m_ci_low`` and ``m_ci_high`` (distribution-free CI of the median,
    :func:`greenbench.stats.median_ci`), plus ``n_repeats``, ``n_runs``, ``git_sha`` ("mixed"
    when pooled over several), ``suites``, ``latest_run_id``, ``skipped_fraction`` and
    ``partial_model`` (`skipped_fraction`). Sorted by J/token. A run that trains part of the
    model per token (`partial_model_mask`) is left out: its figures pay for less work than a
    full-model run's, so it is ranked only beside its own full pipelines (`skipping_board`).
    """
    board = _pool(training_rows(rows), scope)
    return board[~board["partial_model"].astype(bool)].reset_index(drop=True)


def skipping_board(rows: pd.DataFrame, scope: Literal["latest", "all"] = "latest") -> pd.DataFrame:
    """The `leaderboard` rows of runs that train part of the model per token only (SkipPipe
    skipping stages), pooled the same way: what `leaderboard` leaves out, for the views that
    rank them within their own question."""
    board = _pool(training_rows(rows), scope)
    return board[board["partial_model"].astype(bool)].reset_index(drop=True)


def own_measurements(
    rows: pd.DataFrame, scope: Literal["latest", "all"] = "latest"
) -> pd.DataFrame:
    """The `leaderboard` of a user's own measurements only (`own_measurement_mask`, simulated
    runs left out): the same pooled columns and trust, for a table of their own."""
    if len(rows):
        rows = without_simulated(rows)
        rows = rows[own_measurement_mask(rows)]
    return _pool(rows, scope)


def modelled_runs(rows: pd.DataFrame, scope: Literal["latest", "all"] = "latest") -> pd.DataFrame:
    """The `leaderboard` of simulated and emulated-GPU runs only (`simulated_mask`): the same
    pooled columns and trust, for a table of their own, labelled as the model it is."""
    return _pool(rows[simulated_mask(rows)] if len(rows) else rows, scope)


def skipped_fraction(rows: pd.DataFrame) -> pd.Series:
    """Per row, the share of the model's stages each token skips: ``skippipe.skip`` of a
    SkipPipe run whose schedule skips (``skippipe`` or ``random``), 0.0 for a full-model run
    (any other strategy, or SkipPipe's ``full`` and ``full-aware``).

    Read from the stored ``config`` (its settings) where rows carry it, else from the name a
    skipping SkipPipe configuration has (``skip=0.5``, `greenbench.settings.RunSpec.name`);
    a stored ``skipped_fraction`` column (a pooled leaderboard row) is read as it is."""
    if "skipped_fraction" in rows:
        values = pd.to_numeric(rows["skipped_fraction"], errors="coerce").fillna(0.0)
        return pd.Series(values.to_numpy(dtype=float), index=rows.index, name="skipped_fraction")
    n = len(rows)
    strategies = rows["strategy"] if "strategy" in rows else pd.Series([None] * n, index=rows.index)
    configs = rows["config"] if "config" in rows else pd.Series([None] * n, index=rows.index)
    names = rows["config_name"] if "config_name" in rows else pd.Series([""] * n, index=rows.index)
    out = [
        _skipped(str(strategy), config, str(name))
        for strategy, config, name in zip(strategies, configs, names, strict=True)
    ]
    return pd.Series(out, index=rows.index, dtype=float, name="skipped_fraction")


def partial_model_mask(rows: pd.DataFrame) -> pd.Series:
    """Which rows train only part of the model per token (`skipped_fraction` above 0)."""
    return (skipped_fraction(rows) > 0).rename("partial_model")


_SKIP_IN_NAME = re.compile(r"\bskip=([0-9.]+)")


def _skipped(strategy: str, config: object, name: str) -> float:
    settings: dict[str, object] = {}
    if isinstance(config, str) and config:
        try:
            loaded = json.loads(config)
        except ValueError:
            loaded = None
        inner = loaded.get("settings") if isinstance(loaded, dict) else None
        settings = inner if isinstance(inner, dict) else {}
    elif isinstance(config, dict):
        inner = config.get("settings")
        settings = inner if isinstance(inner, dict) else {}
    if settings:
        if settings.get("strategy", strategy) != "skippipe":
            return 0.0
        sp = SCHEMA.config(settings).skippipe
        if sp is None or not skips(sp.schedule):
            return 0.0
        try:
            return max(0.0, float(sp.skip))
        except (TypeError, ValueError):
            return 0.0
    if strategy != "skippipe":
        return 0.0
    found = _SKIP_IN_NAME.search(name)
    return float(found.group(1)) if found else 0.0


def _pool(rows: pd.DataFrame, scope: str) -> pd.DataFrame:
    """`leaderboard`'s pooling of ``rows`` (already chosen)."""
    columns = [
        *dict.fromkeys((*GROUP_KEYS, "config_key", *CONFIG_COLUMNS)),
        *(c for m in METRICS for c in (m, f"{m}_ci_low", f"{m}_ci_high")),
        "n_repeats",
        "n_runs",
        "n_seeds",
        "git_sha",
        "suites",
        "latest_run_id",
        "last_started_at",
        "skipped_fraction",
        "partial_model",
        *TRUST_FIELDS,
    ]
    if scope not in ("latest", "all"):
        raise ValueError(f"scope must be 'latest' or 'all', not {scope!r}")
    if rows.empty:
        return pd.DataFrame(columns=columns)
    data = with_seed_group(with_derived(rows))
    data["skipped_fraction"] = skipped_fraction(data)
    if scope == "latest":
        data = _latest_version_only(data)
    out = []
    for _, group in data.groupby(list(GROUP_KEYS), dropna=False, sort=False):
        group = group.sort_values(["started_at", "repeat"])
        last = group.iloc[-1]
        row = {k: last[k] for k in dict.fromkeys((*GROUP_KEYS, "config_key", *CONFIG_COLUMNS))}
        trust = trust_fields(group)
        seeds = n_seeds(group)
        for m in METRICS:
            if m == "peak_mem_bytes":  # a peak is a maximum, not a typical value
                med, low, high = float(group[m].max()), math.nan, math.nan
            elif m == "net_joules_per_token" and trust["n_idle_unreliable"]:
                med, low, high = math.nan, math.nan, math.nan  # net energy unknown: with why
            elif m not in group:  # a database or rows older than the metric: unknown
                med, low, high = math.nan, math.nan, math.nan
            else:  # over seeds: each run's median one sample (module docstring)
                med, low, high = _summary(samples(group, m, per_run=seeds > 1))
            row |= {m: med, f"{m}_ci_low": low, f"{m}_ci_high": high}
        shas = group["git_sha"].unique()
        skipped = float(group["skipped_fraction"].max())
        n_runs = group["run_id"].nunique()
        row |= {
            "n_repeats": len(group),
            "n_runs": n_runs,
            "n_seeds": seeds,
            "git_sha": shas[0] if len(shas) == 1 else "mixed",
            "suites": ", ".join(sorted({str(s) for s in group["suite"].dropna()})),
            "latest_run_id": last["run_id"],
            "last_started_at": last["started_at"],
            "skipped_fraction": skipped,
            "partial_model": skipped > 0,
            **trust,
        }
        out.append(with_trust(row, n_runs if seeds > 1 else None))
    board = pd.DataFrame(out, columns=columns)
    return board.sort_values(
        ["partial_model", "joules_per_token", "tokens_per_s"],
        ascending=[True, True, False],
        na_position="last",
    ).reset_index(drop=True)


def history(
    rows: pd.DataFrame,
    config_key: str,
    energy_source: str | None = None,
    *,
    by: str | None = None,
    branch: str | None = None,
    label: str | None = None,
) -> pd.DataFrame:
    """J/token and tokens/s of one configuration per point of a history axis, oldest first.

    ``by`` is the axis (`greenbench.reporting.axes`: ``commit``, ``branch``, ``label`` or
    ``date``; None: commit where every run has a git sha, else date); ``branch`` and ``label``
    keep only the runs of that git branch and label. One row per (point, series, energy source)
    where the series is the runs' label (`axes.series_values`), so runs under two labels are
    never one point, with medians and CIs of ``joules_per_token``, ``net_joules_per_token`` and
    ``tokens_per_s`` over the point's repeats, the number of repeats and runs, the first/last
    start time, ``git_sha`` and ``git_branch`` (the point's one value, "mixed" over several,
    None where unknown) and the trust of its repeats (`TRUST_FIELDS`). Points are ordered by
    the first time a run of them started. ``attrs``: ``by`` (the axis used) and ``left_out``
    (runs without a value on it: no sha, no branch).
    """
    metrics = ("joules_per_token", "net_joules_per_token", "tokens_per_s")
    columns = [
        "point",
        "series",
        "git_sha",
        "git_branch",
        "energy_source",
        "energy_measured",
        *(c for m in metrics for c in (m, f"{m}_ci_low", f"{m}_ci_high")),
        "n_repeats",
        "n_runs",
        "first_started_at",
        "last_started_at",
        *TRUST_FIELDS,
    ]
    sel = axes.narrowed(rows[rows["config_key"] == config_key], branch, label)
    if energy_source is not None:
        sel = sel[sel["energy_source"] == energy_source]
    by = axes.default_axis(sel) if by is None else axes.check_axis(by)
    sel = sel.assign(point=axes.axis_values(sel, by), series=axes.series_values(sel))
    left_out = int(sel.loc[sel["point"].isna(), "run_id"].nunique())
    sel = sel[sel["point"].notna()]
    if sel.empty:
        return _with_attrs(pd.DataFrame(columns=columns), by, left_out)
    branches = axes.axis_values(sel, "branch")
    sel = with_derived(sel.assign(git_sha=sel["git_sha"].fillna("unknown"), git_branch=branches))
    out = []
    for (point, series, source, measured), group in sel.groupby(
        ["point", "series", "energy_source", "energy_measured"], dropna=False, sort=False
    ):
        row: dict[str, object] = {
            "point": point,
            "series": series,
            "git_sha": _one(group["git_sha"]),
            "git_branch": _one(group["git_branch"].dropna()),
            "energy_source": source,
            "energy_measured": measured,
        }
        trust = trust_fields(group)
        for m in metrics:
            if m == "net_joules_per_token" and trust["n_idle_unreliable"]:
                med, low, high = math.nan, math.nan, math.nan
            elif m not in group:  # a database or rows older than the metric: unknown
                med, low, high = math.nan, math.nan, math.nan
            else:
                med, low, high = _summary(group[m])
            row |= {m: med, f"{m}_ci_low": low, f"{m}_ci_high": high}
        row |= {
            "n_repeats": len(group),
            "n_runs": group["run_id"].nunique(),
            "first_started_at": group["started_at"].min(),
            "last_started_at": group["started_at"].max(),
            **trust,
        }
        out.append(with_trust(row))
    hist = pd.DataFrame(out, columns=columns)
    hist = hist.sort_values(["first_started_at", "energy_source"]).reset_index(drop=True)
    return _with_attrs(hist, by, left_out)


def _one(values: pd.Series) -> object:
    """The one value of ``values``; "mixed" for several, None for none."""
    distinct = values.unique()
    if len(distinct) == 0:
        return None
    return distinct[0] if len(distinct) == 1 else "mixed"


def _with_attrs(hist: pd.DataFrame, by: str, left_out: int) -> pd.DataFrame:
    hist.attrs |= {"by": by, "left_out": left_out}
    return hist
