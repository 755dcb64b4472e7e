"""Runs to a target loss pooled over seeds: each configuration's time, energy, tokens and steps
to the target with an interval over its seeds, and how a number or an interval is written.

Pure functions over the rows `greenbench.reporting.target_rows` reads (one per repeat), so the
report, the dashboard and the tests compute the same figures without a database.

**A run that did not reach the target took more than its budget**, so its figure to target is
not unknown but larger than any that was reached: it counts as +∞ (a censored value). A median
over repeats or seeds is then a figure only where the reached ones make it one (more than half
reached), and an interval's upper end can be "not reached". Nothing is invented for a run
that did not reach: where the median did not, the cell says so, with the best validation loss
it got to ("not reached (best 4.12)").

**Seeds are the samples.** Each seed (a run; the newest run of each configuration) is one
value: the median over its repeats (each a fresh model from initialisation). A configuration
is a ``seed_group`` (its runs differ only in their seed) and one kind of energy figure:
measured and estimated energy are never pooled. Its interval is the distribution-free one of
the median over its seeds (`greenbench.stats.median_ci`): a 95 % CI from 6 seeds, else the
min–max range of the seeds, which with two or three seeds is wide and is named so
(`seeds_caption`).

**Partial-model runs are ranked here.** A SkipPipe run that skips stages trains part of the
model per token, which is why it is kept off the J/token leaderboard; reaching a common loss is
the same work whatever it costs per token, so on the to-target axis (`target_front`) it is
ranked with every other run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from greenbench.reporting.cells import g
from greenbench.reporting.leaderboard import pareto_front, skipped_fraction
from greenbench.stats import median_ci
from greenbench.vocabulary import energy_label
from greenbench.vocabulary.trust import flagged, interval_for, repeats_for_interval

#: the figures to a target, censored where the target was not reached (module docstring)
FIGURES = (
    "energy_to_target_j", "energy_to_target_net_j", "seconds_to_target", "tokens_to_target",
    "steps_to_target",
)  # fmt: skip
#: how each is named in a table or on an axis
LABELS = {
    "energy_to_target_j": "energy to target (J)",
    "energy_to_target_net_j": "net energy to target (J)",
    "seconds_to_target": "time to target (s)",
    "tokens_to_target": "tokens to target",
    "steps_to_target": "steps to target",
}
#: the figures that come from an energy meter (labelled with it, an estimate marked)
ENERGY_FIGURES = ("energy_to_target_j", "energy_to_target_net_j")
NOT_REACHED = "not reached"


def settings_of(config: Any) -> dict[str, Any]:
    """The settings of a stored configuration (the RunSpec's JSON, or its dict); empty where
    it holds none."""
    try:
        data = json.loads(config) if isinstance(config, str) else config
    except ValueError:
        return {}
    inner = data.get("settings") if isinstance(data, dict) else None
    return dict(inner) if isinstance(inner, dict) else {}


def censored(values: Iterable[Any], reached: Iterable[Any]) -> list[float]:
    """Each value where its run reached the target, +∞ where it did not; a reached value that
    is unknown (a meter that could not be read) is left out, never guessed."""
    out = []
    for value, hit in zip(values, reached, strict=True):
        if not flagged(hit):
            out.append(math.inf)
        elif value is not None and not pd.isna(value):
            out.append(float(value))
    return out


@dataclass(frozen=True, slots=True)
class Spread:
    """A median over ``n`` values with its interval (``low``, ``high``); +∞ where it falls on a
    run that did not reach the target, NaN where no value is known."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """The median and its distribution-free interval over ``values`` (`median_ci`)."""
        xs = [float(v) for v in values if not math.isnan(float(v))]
        if not xs:
            return cls(math.nan, math.nan, math.nan, 0)
        med, low, high = median_ci(xs)  # +∞ sorts last: an unreached run is the largest
        return cls(med, low, high, len(xs))

    @property
    def reached(self) -> bool:
        """Whether the median is a figure (the median value reached the target)."""
        return math.isfinite(self.median)

    @property
    def has_interval(self) -> bool:
        """Whether there are two or more values, and so an interval at all."""
        return self.n >= 2


def seed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per seed: each configuration's newest run, its repeats pooled (module
    docstring): per figure the censored median, ``reached`` (its median repeat reached the
    target), ``n_repeats``/``n_reached``, the median target loss,
    ``best_val_loss`` (the lowest over its repeats), ``best_not_reached`` (the lowest over
    those that did not reach; NaN where all did), evaluation seconds and joules (medians), its
    energy label and settings."""
    columns = [
        "run_id", "config_key", "seed_group", "seed", "config_name", "config", "settings",
        "workload", "suite", "strategy", "model_family", "model_size", "devices", "device_type",
        "started_at", "energy_source", "energy_measured", "energy", "contended",
        "skipped_fraction", "partial_model", "n_repeats", "n_reached", "reached", "target_loss",
        "best_val_loss", "best_not_reached", "eval_s", "eval_energy_j", *FIGURES,
    ]  # fmt: skip
    if rows.empty:
        return pd.DataFrame(columns=columns)
    newest = rows.sort_values("started_at").groupby("config_key")["run_id"].last()
    rows = rows[rows["run_id"].isin(set(newest))]
    out = []
    for run_id, repeats in rows.groupby("run_id", sort=False):
        first = repeats.iloc[0]
        reached = list(repeats["target_reached"])
        settings = settings_of(first["config"])
        figures = {f: _median(censored(repeats[f], reached)) for f in FIGURES}
        misses = repeats[~repeats["target_reached"].map(flagged)]["best_val_loss"]
        labels = sorted(
            {energy_label(s, m) for s, m in zip(repeats["energy_source"],
                                               repeats["energy_measured"], strict=True)}
        )  # fmt: skip
        out.append(
            {
                "run_id": run_id,
                **{k: first.get(k) for k in ("config_key", "seed_group", "config_name", "config",
                                             "workload", "suite", "strategy", "model_family",
                                             "model_size", "device_type", "started_at")},
                "seed": settings.get("seed"),
                "settings": settings,
                "devices": _devices(first),
                "energy_source": "+".join(sorted({str(s) for s in repeats["energy_source"]})),
                "energy_measured": bool(repeats["energy_measured"].map(flagged).all()),
                "energy": " / ".join(labels),
                "contended": bool(flagged(first.get("contended"))),
                "n_repeats": len(repeats),
                "n_reached": int(sum(flagged(r) for r in reached)),
                "reached": median_reached(reached),
                "target_loss": _median(_numbers(repeats["target_loss"])),
                "best_val_loss": min(_numbers(repeats["best_val_loss"]), default=math.nan),
                "best_not_reached": min(_numbers(misses), default=math.nan),
                "eval_s": _median(_numbers(repeats["eval_s"])),
                "eval_energy_j": _median(_numbers(repeats["eval_energy_j"])),
                **figures,
            }
        )  # fmt: skip
    seeds = pd.DataFrame(out)
    seeds["skipped_fraction"] = skipped_fraction(seeds)
    seeds["partial_model"] = seeds["skipped_fraction"] > 0
    return seeds[columns].sort_values("started_at").reset_index(drop=True)


def median_reached(reached: Sequence[Any]) -> bool:
    """Whether the median run of these reached the target (more than half of them did: the
    median of an even count falls between the middle two, +∞ where one did not reach)."""
    return math.isfinite(_median(censored([0.0] * len(reached), reached)))


def _devices(row: pd.Series) -> int:
    try:
        return int(row.get("nproc")) * int(row.get("nnodes"))
    except (TypeError, ValueError):
        return 0


def _numbers(values: Iterable[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and not pd.isna(v)]


def _median(xs: Sequence[float]) -> float:
    """The median (the mean of the middle two, +∞ where one is); NaN without values."""
    if not xs:
        return math.nan
    return Spread.of(xs).median


def target_board(seeds: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (seed group) and energy label, pooled over its seeds (module
    docstring): for each figure its median, ``_low``, ``_high`` (+∞: not reached) and ``_n``
    (seeds with a value); ``n_seeds``, ``n_reached`` (seeds whose median repeat reached), the target
    loss (median, and ``target_low``/``target_high`` where seeds aimed at different ones),
    ``best_not_reached`` (the lowest best loss of any seed that did not reach), evaluation
    seconds and joules (medians over seeds), the newest seed's name, settings and run id,
    every seed's run id, and whether any was ``contended``. Sorted by workload, then energy
    to target."""
    if seeds.empty:
        return pd.DataFrame(columns=["seed_group", "energy", "n_seeds", *FIGURES])
    out = []
    for (group, label), runs in seeds.groupby(["seed_group", "energy"], sort=False):
        last = runs.iloc[-1]
        row: dict[str, Any] = {
            "seed_group": group,
            "energy": label,
            **{k: last[k] for k in ("config_name", "workload", "strategy", "model_family",
                                    "model_size", "devices", "device_type", "settings",
                                    "skipped_fraction", "partial_model", "energy_source",
                                    "energy_measured", "started_at", "config_key")},
            "latest_run_id": last["run_id"],
            "run_ids": list(runs["run_id"]),
            "seeds": list(runs["seed"]),
            "n_seeds": len(runs),
            "n_reached": int(runs["reached"].sum()),
            "contended": bool(runs["contended"].any()),
            "best_not_reached": min(_numbers(runs["best_not_reached"]), default=math.nan),
            "eval_s": _median(_numbers(runs["eval_s"])),
            "eval_energy_j": _median(_numbers(runs["eval_energy_j"])),
        }  # fmt: skip
        targets = _numbers(runs["target_loss"])
        row |= {
            "target_loss": _median(targets),
            "target_low": min(targets, default=math.nan),
            "target_high": max(targets, default=math.nan),
        }
        for f in FIGURES:
            spread = Spread.of(list(runs[f]))
            row |= {f: spread.median, f"{f}_low": spread.low, f"{f}_high": spread.high,
                    f"{f}_n": spread.n}  # fmt: skip
        out.append(row)
    board = pd.DataFrame(out)
    return board.sort_values(
        ["workload", "energy_to_target_j", "seconds_to_target"], na_position="last"
    ).reset_index(drop=True)


def spread(row: pd.Series | dict[str, Any], figure: str) -> Spread:
    """A board row's `Spread` of ``figure``."""
    return Spread(
        float(row[figure]), float(row[f"{figure}_low"]), float(row[f"{figure}_high"]),
        int(row[f"{figure}_n"]),
    )  # fmt: skip


# ------------------------------------------------------------------------------ writing


def distinct_names(board: pd.DataFrame) -> list[str]:
    """Each board row's configuration name, made one of its own where names repeat: runs to
    different targets (or with other settings that no name shows) share a name, so the target,
    then the energy label, then the seed group's key is added until each is distinct."""
    names = [str(n) for n in board["config_name"]]
    for extra in (
        lambda r: f"target {target_text(r)}",
        lambda r: str(r["energy"]),
        lambda r: f"group {str(r['seed_group'])[:8]}",
    ):
        seen = pd.Series(names).duplicated(keep=False)
        if not seen.any():
            break
        names = [
            f"{n} · {extra(r)}" if dup else n
            for n, dup, (_, r) in zip(names, seen, board.iterrows(), strict=True)
        ]
    return names


def number(v: float, unit: str = "") -> str:
    """``v`` in 4 significant digits (thousands separated above 10 000), "not reached" for +∞,
    "n/a" for unknown."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if math.isinf(v):
        return NOT_REACHED
    text = f"{v:,.0f}" if abs(v) >= 10_000 else g(v)
    return f"{text} {unit}".rstrip()


def not_reached(best: float) -> str:
    """ "not reached (best 4.12)": how close it got, never a figure it did not reach."""
    if best is None or math.isnan(best):
        return NOT_REACHED
    return f"{NOT_REACHED} (best {best:.3g})"


def cell(s: Spread, best: float = math.nan, unit: str = "", interval: bool = True) -> str:
    """A figure with its interval: ``12.3 [10.1–14.2]``, ``12.3 [10.1–not reached]``, or, where
    the median did not reach, ``not reached (best 4.12)``; no interval from one seed."""
    if s.n == 0:
        return "n/a"
    if not s.reached:
        return not_reached(best)
    text = number(s.median, unit)
    if interval and s.has_interval:
        text += f" [{number(s.low)}–{number(s.high)}]"
    return text


def seeds_caption(ns: Iterable[int]) -> str:
    """What the intervals over seeds are, for rows of ``ns`` seeds: a 95 % CI from
    `repeats_for_interval` seeds on; below, the min–max range of the seeds, which is not a CI
    and, from two or three seeds, wide; one seed has none."""
    kinds = {interval_for(int(n)).kind for n in ns}
    need = repeats_for_interval()
    parts = []
    if "ci" in kinds:
        parts.append(f"a 95 % CI of the median over the seeds where there are ≥ {need}")
    if "range" in kinds:
        parts.append(
            f"the min–max range of the seeds where there are fewer than {need}: not a CI, and "
            "from two or three seeds a wide one (the truth may lie outside it)"
        )
    if "single" in kinds:
        parts.append("no interval where there is one seed")
    return "Intervals over seeds, in brackets: " + "; ".join(parts) + "."


def target_text(row: pd.Series | dict[str, Any]) -> str:
    """The target loss of a board row, or the range its seeds aimed at (a chain drawn by each
    seed gives each its own floor, and so its own target)."""
    low, high = float(row["target_low"]), float(row["target_high"])
    if math.isnan(low):
        return "n/a"
    return f"{low:.4g}" if math.isclose(low, high, rel_tol=1e-9) else f"{low:.4g}–{high:.4g}"


# ------------------------------------------------------------------------------ front


def target_front(board: pd.DataFrame, energy: str = "energy_to_target_j") -> pd.Series:
    """Which rows are on the Pareto front of time against ``energy`` to target (both lower is
    better), one front per workload and energy label; partial-model runs ranked with the rest
    (module docstring). A configuration whose median did not reach the target is on none."""
    mask = pd.Series(False, index=board.index, name="pareto")
    if board.empty:
        return mask
    finite = board[
        np.isfinite(pd.to_numeric(board["seconds_to_target"], errors="coerce"))
        & np.isfinite(pd.to_numeric(board[energy], errors="coerce"))
    ]
    for _, part in finite.groupby(["workload", "energy"], dropna=False, sort=False):
        mask.loc[part.index] = pareto_front(part, "seconds_to_target", energy, "min", "min")
    return mask
