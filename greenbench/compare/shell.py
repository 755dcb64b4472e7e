"""``greenbench compare`` behind the click layer: parse options, load REFs, judge, print.

``compare_cli`` returns the process exit code (0 ok, 3 regression, 4 inconclusive (a contended
run included) or unstable with ``strict``, 2 usage error) and prints one line on stderr for a
usage error.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import pandas as pd

from greenbench.compare.render import emit
from greenbench.compare.rule import compare, compare_history
from greenbench.compare.verdict import (
    ALIASES,
    DEFAULT_ALPHA,
    DEFAULT_CV_CAP,
    DEFAULT_DELTA,
    HISTORY_WINDOW,
    METRICS,
    resolve_metric,
)
from greenbench.errors import GreenbenchError, SpecError
from greenbench.reporting.axes import check_axis, narrowed, series_values
from greenbench.reporting.refs import latest_sha_per_config, load_ref, newest_run_per_config

FORMATS = {"table": "table", "terminal": "table", "text": "table", "markdown": "markdown"}
FORMATS |= {"md": "markdown", "json": "json"}


def compare_cli(
    db_path: str | Path,
    baseline: str | None,
    candidate: str | None,
    metrics: str | Sequence[str] | None = None,
    threshold: str | float | Sequence[str] | None = None,
    alpha: float = DEFAULT_ALPHA,
    strict: bool = False,
    fmt: str = "table",
    history: bool = False,
    *,
    cv_cap: float = DEFAULT_CV_CAP,
    window: int = HISTORY_WINDOW,
    out: TextIO | None = None,
    allow_contended: bool = False,
    by: str | None = None,
    branch: str | None = None,
    label: str | None = None,
) -> int:
    """Run one comparison and print it; returns the exit code.

    ``metrics``: names or aliases, comma-separated or a sequence (default joules_per_token).
    ``threshold``: δ, e.g. ``"5%"``, ``0.05``, or overrides ``"5%,tokens_per_s=10%,
    fsdp-vs-odc:joules_per_token=8%"`` (keys: metric, workload, or workload:metric).
    ``history``: judge the newest run of each configuration ``candidate`` names against the
    last ``window`` other runs of that configuration under ``baseline`` (usually the branch
    label, e.g. ``main``; it may name the candidate too). ``by``: what one history result is
    (``commit``, ``branch``, ``label`` or ``date``; default commit where every run has a git
    sha, else date: `greenbench.reporting.axes`); ``branch``, ``label``: keep only the history
    runs of that git branch, that label. A history that spans several labels is refused unless
    ``label`` picks one or ``by`` is ``label``: runs under different labels are different series,
    never one history. ``allow_contended``: judge runs that shared the machine instead of
    calling their comparisons inconclusive.
    """
    out = out or sys.stdout
    try:
        names = parse_metrics(metrics)
        delta = parse_threshold(threshold)
        fmt_key = FORMATS.get(fmt.lower())
        if fmt_key is None:
            raise SpecError(f"unknown format {fmt!r}: choose table, markdown or json")
        if not 0.0 < alpha < 1.0:
            raise SpecError(f"alpha must lie in (0, 1), got {alpha}")
        if not candidate:
            raise SpecError("give --candidate REF (a run id, git sha, label or exported file)")
        if not baseline:
            what = "the branch label whose results form the history" if history else "a REF"
            raise SpecError(f"give --baseline: {what}")
        if not history and (by or branch is not None or label is not None):
            raise SpecError("--by, --branch and --label go with --history")
        if by is not None:
            check_axis(by)
        cand = load_ref(db_path, candidate)
        base = load_ref(db_path, baseline)
        base_kind, cand_kind = base.attrs.get("ref_kind"), cand.attrs.get("ref_kind")
        notes: list[str] = []
        if history:  # the new result is the newest run of each configuration the REF names
            cand = newest_run_per_config(cand)
        elif cand_kind == "label":
            cand = _newest(cand, candidate, notes)
        base = base[~base["run_id"].isin(set(cand["run_id"]))]
        if base.empty:
            raise SpecError(f"baseline {baseline!r} names only the candidate's own runs")
        if history:
            base = _history_runs(base, baseline, by, branch, label)
        kwargs = dict(
            metrics=names, delta=delta, alpha=alpha, cv_cap=cv_cap, strict=strict,
            allow_contended=allow_contended,
        )  # fmt: skip
        if history:
            verdict = compare_history(base, cand, window=window, by=by, **kwargs)
        else:
            if base_kind == "label":
                base = _newest(base, baseline, notes)
            verdict = compare(base, cand, **kwargs)
        verdict = dataclasses.replace(
            verdict, baseline_ref=baseline, candidate_ref=candidate, notes=tuple(notes)
        )
        emit(verdict, fmt_key, out)
        return verdict.exit_code
    except GreenbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


def parse_metrics(metrics: str | Sequence[str] | None) -> list[str]:
    """Canonical metric names from a comma list or a sequence; default joules_per_token."""
    if metrics is None:
        return ["joules_per_token"]
    items = [metrics] if isinstance(metrics, str) else list(metrics)
    names = [n.strip() for item in items for n in item.split(",") if n.strip()]
    return [resolve_metric(n).column for n in names] or ["joules_per_token"]


def parse_threshold(threshold: str | float | Sequence[str] | None) -> float | dict[str, float]:
    """δ as a float, or a dict of overrides with ``"*"`` as the default (see ``delta_for``)."""
    if threshold is None:
        return DEFAULT_DELTA
    if isinstance(threshold, int | float):
        return _fraction(str(threshold))
    items = [threshold] if isinstance(threshold, str) else list(threshold)
    parts = [p.strip() for item in items for p in item.split(",") if p.strip()]
    overrides: dict[str, float] = {}
    default = DEFAULT_DELTA
    for part in parts:
        if "=" not in part:
            default = _fraction(part)
            continue
        key, value = (s.strip() for s in part.split("=", 1))
        workload, _, metric = key.rpartition(":")
        if not workload and (key in METRICS or key in ALIASES):
            key = resolve_metric(key).column
        elif workload:
            key = f"{workload}:{resolve_metric(metric).column}"
        overrides[key] = _fraction(value)
    if not overrides:
        return default
    return {"*": default, **overrides}


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        raise SpecError(f"bad threshold {text!r}: write 5% or 0.05") from None
    if not 0.0 <= value < 1.0:
        raise SpecError(f"threshold {text!r} is outside [0%, 100%): write 5% or 0.05")
    return value


def _history_runs(
    base: pd.DataFrame, ref: str, by: str | None, branch: str | None, label: str | None
) -> pd.DataFrame:
    """The history: the baseline's runs on ``branch`` under ``label`` (None: any), refused
    where nothing is left or where it spans several labels and ``by`` is not ``label``."""
    kept = narrowed(base, branch, label)
    if kept.empty:
        where = " and ".join(
            f"{what} {value!r}" for what, value in (("branch", branch), ("label", label)) if value
        )
        raise SpecError(
            f"baseline {ref!r} holds no run on {where} besides the candidate's: "
            "see `greenbench list runs`"
        )
    labels = sorted(set(series_values(kept)))
    if by != "label" and len(labels) > 1:
        shown = ", ".join(repr(x) for x in labels[:6]) + (", …" if len(labels) > 6 else "")
        raise SpecError(
            f"baseline {ref!r} spans {len(labels)} labels ({shown}), which are separate series: "
            "pick one with --label L, or make each label one history result with --by label"
        )
    return kept


def _newest(df: pd.DataFrame, ref: str, notes: list[str]) -> pd.DataFrame:
    kept = latest_sha_per_config(df)
    if len(kept) < len(df):
        shas = sorted({str(s)[:10] for s in kept["git_sha"].dropna()})
        notes.append(
            f"{ref!r} spans several commits; compared its newest per configuration"
            + (f" ({', '.join(shas)})" if shas else "")
        )
    return kept
