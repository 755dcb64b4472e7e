"""What a comparison produces: metric directions, one Row per judged metric, the Verdict.

Exit codes (``Verdict.exit_code``): 0 no regression (improvements are reported), 3 regression,
4 inconclusive (too few repeats, no values, or a contended run) or unstable evidence (only with
``strict``). The CLI adds 2 for usage errors and
1 for internal errors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from greenbench.errors import SpecError
from greenbench.vocabulary import ALIASES, COMPARABLE_METRICS, Metric, energy_label
from greenbench.vocabulary import METRICS as ALL_METRICS

DEFAULT_DELTA = 0.05
DEFAULT_ALPHA = 0.01
DEFAULT_CV_CAP = 0.10
HISTORY_WINDOW = 64
HISTORY_MIN = 3  # history results needed before a prediction interval means anything


#: what `greenbench compare` can judge (the vocabulary's definitions)
METRICS: dict[str, Metric] = {name: ALL_METRICS[name] for name in COMPARABLE_METRICS}
SYMBOLS = {"regression": "+", "improvement": "-", "unchanged": "~", "inconclusive": "?"}


@dataclass(frozen=True, slots=True)
class Row:
    """The verdict on one metric of one configuration."""

    workload: str
    config_name: str
    config_key: str
    energy_source: str
    energy_measured: bool
    device_type: str
    nproc: int
    metric: str
    lower_is_better: bool
    n_baseline: int  # repeats (history mode: history results, points of its axis)
    n_candidate: int
    baseline_median: float
    candidate_median: float
    ratio: float  # candidate / baseline
    delta: float
    p_worse: float  # raw one-sided p for "candidate is worse"
    p_worse_holm: float
    p_better_holm: float
    min_p: float  # smallest raw p the test could give with these sample sizes
    cv_baseline: float
    cv_candidate: float
    status: str  # regression | improvement | unchanged | inconclusive
    unstable: bool
    note: str = ""
    layout: str = ""  # e.g. "dpr1-dps2-tp1-pp1-cp1"
    #: a run of either side shared the machine (runs.contended): inconclusive unless allowed
    contended: bool = False
    #: the seed group compared (`greenbench.reporting.seeds`: its config_key where unknown) and
    #: how many seeds its two sides hold; above 1, each run's median was one sample
    seed_group: str = ""
    seeds: int = 1

    @property
    def symbol(self) -> str:
        return SYMBOLS[self.status]

    @property
    def energy_label(self) -> str:
        return energy_label(self.energy_source, self.energy_measured)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A configuration that could not be compared, and why."""

    side: str  # "baseline only" | "candidate only"
    workload: str
    config_name: str
    energy: str  # e.g. "estimate" or "rapl, measured"
    reason: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """All rows of one ``compare`` call, the mismatches, and the resulting exit code."""

    rows: tuple[Row, ...]
    mismatches: tuple[Mismatch, ...]
    alpha: float
    cv_cap: float
    strict: bool
    mode: str = "samples"  # "samples" | "history"
    history_by: str | None = None  # history mode: what one history result is (its axis)
    baseline_ref: str = ""
    candidate_ref: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def regressions(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.status == "regression")

    @property
    def doubtful(self) -> bool:
        """Nothing compared, or a row inconclusive or unstable (exit 4 under --strict)."""
        return not self.rows or any(r.status == "inconclusive" or r.unstable for r in self.rows)

    @property
    def exit_code(self) -> int:
        if self.regressions:
            return 3
        if self.strict and self.doubtful:
            return 4
        return 0

    @property
    def outcome(self) -> str:
        """The verdict in one word, for CI (an action's output): ``regression``,
        ``inconclusive`` (nothing compared, or a row inconclusive: too few repeats, no values,
        a contended run), ``unstable`` (a row's CV above the cap) or ``pass``."""
        if self.regressions:
            return "regression"
        if not self.rows or any(r.status == "inconclusive" for r in self.rows):
            return "inconclusive"
        if any(r.unstable for r in self.rows):
            return "unstable"
        return "pass"

    @property
    def summary(self) -> str:
        if self.regressions:
            return f"REGRESSION in {len(self.regressions)} of {len(self.rows)} comparisons"
        if self.doubtful:
            why = (
                "inconclusive, contended or unstable"
                if any(r.contended and r.status == "inconclusive" for r in self.rows)
                else "inconclusive/unstable"
            )
            return f"no regression shown, but the evidence is incomplete ({why})"
        return "no regression"

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for r in self.rows:
            d = {k: json_safe(v) for k, v in asdict(r).items()}
            d["symbol"] = r.symbol
            rows.append(d)
        return {
            "mode": self.mode,
            "history_by": self.history_by,
            "baseline": self.baseline_ref,
            "candidate": self.candidate_ref,
            "alpha": self.alpha,
            "cv_cap": self.cv_cap,
            "strict": self.strict,
            "exit_code": self.exit_code,
            "outcome": self.outcome,
            "summary": self.summary,
            "rows": rows,
            "mismatches": [asdict(m) for m in self.mismatches],
            "notes": list(self.notes),
        }


def resolve_metric(name: str) -> Metric:
    """The Metric named ``name`` or an alias of it; SpecError listing the known ones otherwise."""
    key = ALIASES.get(name.strip(), name.strip())
    if key not in METRICS:
        known = ", ".join([*METRICS, *ALIASES])
        raise SpecError(f"unknown metric {name!r}: choose from {known}")
    return METRICS[key]


def delta_for(delta: float | Mapping[str, float], workload: str, metric: str) -> float:
    """δ for one row: keys ``workload:metric``, ``metric``, ``workload``, ``*`` tried in order."""
    if not isinstance(delta, Mapping):
        return float(delta)
    for key in (f"{workload}:{metric}", metric, workload, "*"):
        if key in delta:
            return float(delta[key])
    return DEFAULT_DELTA


def json_safe(v: Any) -> Any:
    """A plain Python value for JSON: numpy scalars unwrapped, NaN/NA as None, and so is
    infinity (a median over repeats that did not reach their target: the row's note says so)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if v is pd.NA or v is pd.NaT:
        return None
    return v
