"""Regression verdicts for CI: did energy per token (or another metric) get worse?

The rule (docs/compare.md explains it with examples). A metric of one configuration has
*regressed* when both hold:

1. practical effect: median(candidate) / median(baseline) is beyond 1 + δ in the worse direction
   (1 − δ for higher-is-better metrics); δ = 5 % unless overridden per metric or workload;
2. statistical evidence: the one-sided exact Mann–Whitney U test (greenbench.stats) gives
   p < α after Holm's correction over all comparisons of the call; α = 1 % by default.

Improvements are judged the same way in the other direction (a separate Holm family). When the
repeats are too few for any p-value to reach α (the smallest exact p is 1/C(n+m, n), times the
Holm factor) the row is *inconclusive: need more repeats*, never a silent pass. A side whose
coefficient of variation exceeds ``cv_cap`` is flagged unstable.

A result measured while the machine was shared (``runs.contended``; `greenbench.vocabulary.trust`)
is never called a regression or an improvement: a comparison with a contended run on either side
is *inconclusive: contended* (exit 4 under ``strict``) unless ``allow_contended`` says to judge it
anyway, and the note then says it was contended. In history mode contended history runs are left
out of the history (unless allowed), and a contended new result is inconclusive.

Only like is compared with like: rows are grouped by `POOLED_OVER_SEEDS` (the seed group, the
configuration's hash without its seed, then energy source and whether it was measured, device
type and count, precision), so a measured energy is never compared with an estimate, nor a
simulated run (energy source ``model``, its own device type and configuration) with a measured
one; configurations present on one side only are listed as mismatches. Where the two sides of a
comparison hold one seed between them, the samples are the repeats; where they hold several
(``greenbench run --seeds``, or another seed on each side), each run's median is one sample
(`greenbench.reporting.seeds`), so the spread of one seed's repeats is never taken for the
configuration's, and the row says so. A figure to a target loss (``energy_to_target_j`` …) is
judged by the same rule; a repeat that did not reach the target counts as worse than every one
that did. History mode judges a new result against the last ≤ 64 results of the same seed group
with a one-sided Student-t prediction interval on log values, a result being one point of the
history's axis (a commit, a branch, a label or a day: `greenbench.reporting.axes`).

This module is pure (DataFrames in, a Verdict out); ``shell.compare_cli`` is the thin layer the
CLI calls, ``render`` prints verdicts, ``greenbench.reporting.refs`` resolves REFs into DataFrames.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from greenbench import stats
from greenbench.compare.verdict import (
    DEFAULT_ALPHA,
    DEFAULT_CV_CAP,
    DEFAULT_DELTA,
    HISTORY_MIN,
    HISTORY_WINDOW,
    Metric,
    Mismatch,
    Row,
    Verdict,
    delta_for,
    energy_label,
    json_safe,
    resolve_metric,
)
from greenbench.errors import SpecError
from greenbench.reporting import axes
from greenbench.reporting.refs import KEY_COLUMNS
from greenbench.reporting.seeds import censored, n_seeds, samples, seeds_note, with_seed_group
from greenbench.vocabulary import POOLED_OVER_SEEDS, is_simulated
from greenbench.vocabulary.trust import flagged, missing

#: what a comparison pools: the runs of one seed group on the same hardware, with the same kind
#: of energy figure
POOL_COLUMNS = POOLED_OVER_SEEDS


def compare(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    metrics: Sequence[str] = ("joules_per_token",),
    delta: float | Mapping[str, float] = DEFAULT_DELTA,
    alpha: float = DEFAULT_ALPHA,
    cv_cap: float = DEFAULT_CV_CAP,
    strict: bool = False,
    allow_contended: bool = False,
) -> Verdict:
    """Judge every configuration present on both sides, one row per (configuration, metric).

    Both frames hold one row per repeat with the ``refs.KEY_COLUMNS`` and the metric columns
    (as ``refs.load_ref`` returns them), and ``contended`` where known (a missing column or a
    NULL reads as not contended: not watched). ``allow_contended``: judge comparisons with a
    contended run as any other (they say so) instead of calling them inconclusive.
    """
    chosen = [resolve_metric(m) for m in metrics]
    base_groups, cand_groups = _groups(baseline), _groups(candidate)
    pending: list[dict[str, Any]] = []
    for key in _ordered(set(base_groups) & set(cand_groups), cand_groups):
        b, c = base_groups[key], cand_groups[key]
        seeds = n_seeds(pd.concat([b, c]))
        for metric in chosen:
            xb, xc = _values(b, metric, seeds > 1), _values(c, metric, seeds > 1)
            worse, better = (xc, xb) if metric.lower_is_better else (xb, xc)
            p_w = p_b = math.nan
            if len(xb) and len(xc):
                p_w = stats.mannwhitney_greater(worse, better)[1]
                p_b = stats.mannwhitney_greater(better, worse)[1]
            fields = _row_fields(
                c, metric, delta, xb, xc, p_w, p_b, stats.min_p_value(len(xb), len(xc)), seeds
            )
            if metric.to_target:
                fields["context_note"] = _joined(fields["context_note"], _not_reached(b, c))
            pending.append(fields | _contention(b, c))
    rows = _decide(pending, alpha, cv_cap, floor_from_min_p=True, allow_contended=allow_contended)
    return Verdict(
        rows=tuple(rows),
        mismatches=tuple(_mismatches(baseline, candidate, base_groups, cand_groups)),
        alpha=alpha,
        cv_cap=cv_cap,
        strict=strict,
    )


def compare_history(
    history: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    metrics: Sequence[str] = ("joules_per_token",),
    delta: float | Mapping[str, float] = DEFAULT_DELTA,
    alpha: float = DEFAULT_ALPHA,
    cv_cap: float = DEFAULT_CV_CAP,
    strict: bool = False,
    window: int = HISTORY_WINDOW,
    allow_contended: bool = False,
    by: str | None = None,
) -> Verdict:
    """Judge a new result against the last ≤ ``window`` history results of each configuration.

    ``by`` is the history's axis (`greenbench.reporting.axes`: ``commit``, ``branch``,
    ``label`` or ``date``; None: commit where every run of both sides has a git sha, else
    date). A history "result" is one point of it: the median of its runs' medians (each run the
    median of its repeats); runs without a value on the axis (no sha, no branch) are left out
    and the row says how many. The candidate's own runs are never history (the caller leaves
    them out), but other runs of its commit (or day, branch, label) are. The candidate's value
    is the median of its repeats; its p-value comes from the one-sided Student-t prediction
    interval of the log history (``stats.log_t_prediction``), Holm-corrected across rows.
    Contended history runs are left out (the row says how many) and a contended new result is
    inconclusive, unless ``allow_contended``.
    """
    chosen = [resolve_metric(m) for m in metrics]
    by = axes.default_axis(pd.concat([history, candidate])) if by is None else by
    axes.check_axis(by)
    hist_groups, cand_groups = _groups(history), _groups(candidate)
    pending: list[dict[str, Any]] = []
    mismatches: list[Mismatch] = []
    for key in _ordered(set(cand_groups), cand_groups):
        c = cand_groups[key]
        h = hist_groups.get(key)
        if h is None:
            mismatches.append(Mismatch("candidate only", *_describe(c), "no history"))
            continue
        left_out: list[str] = []
        if not allow_contended:
            busy = _contended_mask(h)
            left_out.append(_runs_phrase(h[busy], "contended"))
            h = h[~busy]
        points = axes.axis_values(h, by)
        left_out.append(_runs_phrase(h[points.isna()], after=f"without a {_AXIS_VALUE[by]}"))
        h, points = h[points.notna()], points[points.notna()]
        order = h.groupby(points)["started_at"].min().sort_values()
        recent = h[points.isin(order.index[-window:])]
        seeds = n_seeds(pd.concat([recent, c]))
        for metric in chosen:
            xh = _point_values(recent, points[recent.index], metric)
            xc = _values(c, metric, n_seeds(c) > 1)
            p_w = p_b = math.nan
            finite = np.all(np.isfinite(xh)) and len(xc) and np.isfinite(np.median(xc))
            ok = len(xh) >= HISTORY_MIN and len(xc) and np.all(xh > 0) and np.median(xc) > 0
            if ok and finite:
                _, p_greater = stats.log_t_prediction(xh, float(np.median(xc)))
                p_w, p_b = (p_greater, 1 - p_greater)
                if not metric.lower_is_better:
                    p_w, p_b = p_b, p_w
            fields = _row_fields(c, metric, delta, xh, xc, p_w, p_b, 0.0, seeds)
            if len(xh) < HISTORY_MIN:
                fields["note"] = (
                    f"need ≥ {HISTORY_MIN} history results "
                    f"({axes.points_phrase(HISTORY_MIN, by)}), have {len(xh)}"
                )
            elif ok and not finite:
                fields["note"] = (
                    "a run did not reach its target: the history's prediction interval cannot "
                    "hold it (compare the runs' repeats instead)"
                )
            fields["note"] = _joined(fields["note"], *left_out)
            pending.append(fields | _contention(h.iloc[0:0], c))
    rows = _decide(pending, alpha, cv_cap, floor_from_min_p=False, allow_contended=allow_contended)
    return Verdict(
        rows=tuple(rows),
        mismatches=tuple(mismatches),
        alpha=alpha,
        cv_cap=cv_cap,
        strict=strict,
        mode="history",
        history_by=by,
    )


#: what a run lacks to be on a point of each history axis, in words
_AXIS_VALUE = {"commit": "git sha", "branch": "git branch", "label": "label", "date": "date"}


def _runs_phrase(rows: pd.DataFrame, before: str = "", after: str = "") -> str:
    """What was left out of a history, in words ("3 contended history runs left out", "2
    history runs without a git sha left out"); "" where ``rows`` hold no run."""
    n = rows["run_id"].nunique() if "run_id" in rows else len(rows)
    if not n:
        return ""
    words = [str(n), before, "history", "run" if n == 1 else "runs", after, "left out"]
    return " ".join(w for w in words if w)


def _point_values(rows: pd.DataFrame, points: pd.Series, metric: Metric) -> np.ndarray:
    """One history result per point: the median of its runs' medians (each run the median of
    its repeats; a repeat that did not reach its target counts as +inf, `seeds.censored`)."""
    if rows.empty:
        return np.array([], dtype=float)
    if metric.column not in rows.columns:
        raise SpecError(f"results have no column {metric.column!r}")
    values = censored(rows, metric.column, metric.to_target)
    runs = rows["run_id"] if "run_id" in rows else pd.Series(range(len(rows)), index=rows.index)
    per_run = values.groupby(runs, sort=False).median()
    run_point = points.groupby(runs, sort=False).first()
    per_point = per_run.groupby(run_point[per_run.index], sort=False).median()
    xs = per_point.to_numpy(dtype=float, na_value=np.nan)
    return xs[~np.isnan(xs)]


def _row_fields(
    group: pd.DataFrame,
    metric: Metric,
    delta: float | Mapping[str, float],
    xb: np.ndarray,
    xc: np.ndarray,
    p_worse: float,
    p_better: float,
    min_p: float,
    seeds: int = 1,
) -> dict[str, Any]:
    first = {c: group[c].iat[0] for c in (*POOL_COLUMNS, "config_key", "workload")}
    workload = str(first["workload"])
    mb = float(np.median(xb)) if len(xb) else math.nan
    mc = float(np.median(xc)) if len(xc) else math.nan
    return {
        "workload": workload,
        "config_name": _name(group),
        "layout": _layout(group),
        "config_key": str(first["config_key"]),
        "seed_group": str(first["seed_group"]),
        "seeds": seeds,
        "energy_source": str(first["energy_source"]),
        "energy_measured": bool(first["energy_measured"]),
        "device_type": str(first["device_type"]),
        "nproc": int(first["nproc"]),
        "metric": metric.column,
        "lower_is_better": metric.lower_is_better,
        "n_baseline": len(xb),
        "n_candidate": len(xc),
        "baseline_median": mb,
        "candidate_median": mc,
        "ratio": _ratio(mc, mb),
        "delta": delta_for(delta, workload, metric.column),
        "p_worse": p_worse,
        "p_better": p_better,
        "min_p": min_p,
        "cv_baseline": _cv(xb),
        "cv_candidate": _cv(xc),
        "note": "",
        "context_note": seeds_note(seeds),
    }


def _joined(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _not_reached(b: pd.DataFrame, c: pd.DataFrame) -> str:
    """Which side's repeats did not reach their target (counted as worse than every one that
    did), e.g. "not reached: candidate 2 of 3 repeats"."""
    parts = []
    for side, group in (("baseline", b), ("candidate", c)):
        reached = group["target_reached"] if "target_reached" in group else pd.Series(dtype=object)
        missed = sum(not missing(v) and not bool(v) for v in reached)
        if missed:
            parts.append(f"{side} {missed} of {len(group)} repeats")
    return "not reached (counted worse than any that reached): " + ", ".join(parts) if parts else ""


def _ratio(candidate: float, baseline: float) -> float:
    """candidate ÷ baseline; NaN where either is unknown, or neither side reached a target
    (both +inf: `greenbench.reporting.seeds`)."""
    if math.isnan(baseline) or math.isnan(candidate) or not baseline:
        return math.nan
    if math.isinf(baseline) and math.isinf(candidate):
        return math.nan
    return candidate / baseline


def _cv(xs: np.ndarray) -> float:
    """The coefficient of variation of the known, finite values (a repeat that did not reach
    its target has no spread to measure)."""
    return stats.coefficient_of_variation(xs[np.isfinite(xs)])


def _contended_mask(group: pd.DataFrame) -> pd.Series:
    """Which repeat rows come from runs stored contended (NULL, or no column: not watched)."""
    if "contended" not in group.columns:
        return pd.Series(False, index=group.index)
    return group["contended"].map(flagged).astype(bool)


def _contention(b: pd.DataFrame, c: pd.DataFrame) -> dict[str, Any]:
    """``contended`` and the note saying which side's runs were, for one comparison."""
    parts = []
    for side, group in (("baseline", b), ("candidate", c)):
        busy = _contended_mask(group)
        if busy.any():
            runs = group["run_id"] if "run_id" in group.columns else pd.Series(range(len(group)))
            n_busy, n = runs[busy.to_numpy()].nunique(), runs.nunique()
            parts.append(f"{side} {n_busy} of {n} runs")
    return {"contended": bool(parts), "contended_note": ", ".join(parts)}


def _decide(
    pending: list[dict[str, Any]],
    alpha: float,
    cv_cap: float,
    *,
    floor_from_min_p: bool,
    allow_contended: bool = False,
) -> list[Row]:
    """Apply Holm across the call, then the rule, to the collected rows."""
    adj_worse = stats.holm([p["p_worse"] for p in pending])
    adj_better = stats.holm([p["p_better"] for p in pending])
    k = sum(not math.isnan(p["p_worse"]) for p in pending)
    smallest = min((p["min_p"] for p in pending if not math.isnan(p["p_worse"])), default=1.0)
    rows = []
    for fields, pw, pb in zip(pending, adj_worse, adj_better, strict=True):
        fields.pop("p_better")  # only its Holm-adjusted value is kept
        ratio, d = fields["ratio"], fields["delta"]
        lower = fields["lower_is_better"]
        worse = ratio > 1 + d if lower else ratio < 1 - d
        better = ratio < 1 - d if lower else ratio > 1 + d
        # the lowest Holm-adjusted p this row could reach whatever the data: its own exact
        # minimum, and never below k × the family's smallest minimum (Holm's first step)
        floor = max(fields["min_p"], k * smallest) if floor_from_min_p else 0.0
        note = fields.pop("note")
        context = fields.pop("context_note", "")
        busy = fields.pop("contended_note", "")
        if busy and not allow_contended:
            status = "inconclusive"
            note = "; ".join(
                filter(None, [f"contended: {busy} shared the machine (--allow-contended judges "
                              "them anyway)", note])
            )  # fmt: skip
        elif math.isnan(ratio) or math.isnan(fields["p_worse"]):
            status, note = "inconclusive", note or "no values to compare"
        elif worse and pw < alpha:
            status = "regression"
        elif better and pb < alpha:
            status = "improvement"
        elif floor >= alpha:
            status = "inconclusive"
            n, m = fields["n_baseline"], fields["n_candidate"]
            over = f" over {k} comparisons (Holm)" if floor > fields["min_p"] else ""
            note = note or (
                f"need more repeats: {n} vs {m}{over} cannot reach p < α={alpha} "
                f"(smallest possible p {floor:.2g})"
            )
        else:
            status = "unchanged"
            if (worse or better) and not note:
                note = f"beyond ±{d:.0%} but not significant (p={min(pw, pb):.3g})"
        if busy and allow_contended:
            note = "; ".join(filter(None, [f"contended (allowed): {busy}", note]))
        note = _joined(context, note)
        cvs = (fields["cv_baseline"], fields["cv_candidate"])
        unstable = any(cv > cv_cap for cv in cvs if not math.isnan(cv))
        if unstable:
            note = "; ".join(filter(None, [note, f"unstable: CV above {cv_cap:.0%}"]))
        rows.append(
            Row(
                **fields,
                p_worse_holm=pw,
                p_better_holm=pb,
                status=status,
                unstable=unstable,
                note=note,
            )
        )
    return rows


def _groups(df: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    """The rows of each seed group (`POOL_COLUMNS`; rows without one: their configuration)."""
    missing = [c for c in (*KEY_COLUMNS, "workload") if c not in df.columns]
    if missing:
        names = ", ".join(missing)
        raise SpecError(f"results lack the columns {names} that define a configuration")
    df = with_seed_group(df)
    # plain dict grouping: DataFrame.groupby over seven columns costs milliseconds per call,
    # which the 1,000-trial power test would feel; NaN/NA keys become None so they compare equal
    positions: dict[tuple, list[int]] = {}
    columns = [df[c].tolist() for c in POOL_COLUMNS]
    for i, key in enumerate(zip(*columns, strict=True)):
        positions.setdefault(tuple(json_safe(v) for v in key), []).append(i)
    return {key: df.iloc[idx] for key, idx in positions.items()}


def _ordered(keys: set[tuple], groups: dict[tuple, pd.DataFrame]) -> list[tuple]:
    """Keys in reading order: workload, configuration name, then the rest of the key."""
    return sorted(keys, key=lambda k: (*_describe(groups[k]), repr(k)))


def _describe(group: pd.DataFrame) -> tuple[str, str, str]:
    """(workload, configuration name, energy label) of one configuration's rows."""
    first = group.iloc[0]
    energy = energy_label(first["energy_source"], first["energy_measured"])
    return str(first["workload"]), _name(group), energy


def _values(group: pd.DataFrame, metric: Metric, per_run: bool) -> np.ndarray:
    """A side's samples of a metric: its repeats, or with ``per_run`` its runs' medians
    (`greenbench.reporting.seeds.samples`)."""
    if metric.column not in group.columns:
        raise SpecError(f"results have no column {metric.column!r}")
    return samples(group, metric.column, per_run=per_run, to_target=metric.to_target)


def _layout(group: pd.DataFrame) -> str:
    """The configuration's layout text ("" for results exported before layouts were stored)."""
    if "layout" in group.columns and pd.notna(group["layout"].iloc[0]):
        return str(group["layout"].iloc[0])
    return ""


def _name(group: pd.DataFrame) -> str:
    if "config_name" in group.columns and pd.notna(group["config_name"].iloc[0]):
        return str(group["config_name"].iloc[0])
    return str(group["config_key"].iloc[0])[:12]


def _mismatches(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    base_groups: dict[tuple, pd.DataFrame],
    cand_groups: dict[tuple, pd.DataFrame],
) -> list[Mismatch]:
    out = []
    for side, mine, other in (
        ("baseline only", base_groups, cand_groups),
        ("candidate only", cand_groups, base_groups),
    ):
        for key in _ordered(set(mine) - set(other), mine):
            group = mine[key]
            same_config = [k for k in other if k[0] == key[0]]
            if same_config:
                diffs = [
                    f"{col}: {key[i]} vs {same_config[0][i]}"
                    for i, col in enumerate(POOL_COLUMNS)
                    if key[i] != same_config[0][i]
                ]
                reason = "same configuration, different " + ", ".join(diffs)
                if any(
                    is_simulated(k[POOL_COLUMNS.index("energy_source")])
                    for k in (key, same_config[0])
                ):
                    reason += " (a simulated result is never compared with a measurement)"
                elif "energy_measured" in " ".join(diffs):
                    reason += " (measured energy is never compared with an estimate)"
            else:
                reason = "no result for this configuration on the other side"
            out.append(Mismatch(side, *_describe(group), reason))
    return out
