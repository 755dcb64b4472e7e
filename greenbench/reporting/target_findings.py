"""What runs to a target loss say, computed from the configurations pooled over seeds
(`greenbench.reporting.to_target.target_board`) and the validation curves, never written by
hand: each statement is whatever the figures give, "cannot tell" included.

* **Families** (`family_findings`): among single-rank configurations that differ only in their
  model family (with its own kernel settings, `FAMILY_KEYS`) and seed, which reaches the
  target first and which with the least energy.
* **SkipPipe** (`skippipe_findings`): whether SkipPipe (``skippipe.schedule = skippipe``)
  reaches the target in less time and with less energy than the straggler-aware full pipeline
  (``full-aware``, the strong baseline) under the same settings and straggler.
* **Data parallelism** (`curve_findings`): DDP, FSDP and ODC of one setting train the same
  minibatches from the same initialisation, so their validation losses at equal steps should
  agree up to rounding; the largest difference over seeds, repeats and steps says whether they do.

A comparison is one of `compare`'s verdicts on two `Spread`\\ s: less where one interval lies
wholly below the other, more where wholly above, and "cannot tell" where they overlap, where
a side has one seed (no interval), or where neither reached the target. Energy is compared only
within one kind of energy figure (the rows of a comparison share their energy label); an
estimate is time × modelled power, so its verdict is the time's and is said to be.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from greenbench.config import section_settings, setting_of
from greenbench.reporting.cells import ESTIMATE_FOLLOWS_TIME
from greenbench.reporting.skippipe import condition
from greenbench.reporting.to_target import Spread, cell, spread
from greenbench.settings import (
    SCHEMA,
    DataSettings,
    LayoutSettings,
    ModelSettings,
    RunSettings,
    SkipPipeSettings,
    identity_of,
)
from greenbench.strategies.fsdp_settings import FSDPSettings
from greenbench.strategies.odc.settings import ODCSettings
from greenbench.vocabulary.trust import CONTENDED, interval_for

SEED = setting_of(RunSettings, "seed").key
FAMILY = setting_of(ModelSettings, "family").key
#: what tells one family's configuration from another's otherwise the same: the family and its
#: own kernel settings, resolved per family (a Mamba's scan, a Transformer's Liger kernels); the
#: size (one preset name per family) stays
FAMILY_KEYS = frozenset(
    s.key for s in section_settings(ModelSettings) if s.key != setting_of(ModelSettings, "size").key
)
STRATEGY = setting_of(RunSettings, "strategy").key
SCHEDULE = setting_of(SkipPipeSettings, "schedule").key
SKIP = setting_of(SkipPipeSettings, "skip").key
#: what tells DDP, FSDP and ODC of one setting apart: the strategy, its own sections, the
#: layout it implies and how it splits a minibatch over the ranks (``data.balance``, which ODC
#: resolves to its balancing by cost: the same minibatch, shared otherwise); the workload's
#: name too (the same settings are the same training)
STRATEGY_KEYS = frozenset(
    {STRATEGY, setting_of(DataSettings, "balance").key, "workload"}
    | {s.key for cls in (LayoutSettings, FSDPSettings, ODCSettings) for s in section_settings(cls)}
)
DATA_PARALLEL = ("ddp", "fsdp", "odc")
#: the schedules the SkipPipe statement compares: SkipPipe against the straggler-aware full
#: pipeline (a full pipeline that keeps feeding the straggler is the weak baseline)
SKIPPIPE, AWARE = "skippipe", "full-aware"
#: validation losses closer than this share of the loss count as equal: what one step of the
#: strategies is held to against a single process in their equivalence tests; over many steps
#: rounding can compound beyond it, which the statement says rather than hides
SAME_LOSS_RTOL = 1e-4

Word = Literal["less", "more", "cannot tell"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """How ``a`` compares with ``b`` (`compare`): ``word`` and, for "cannot tell", why."""

    word: Word
    why: str = ""

    def text(self, what: str) -> str:
        """``less time``, ``cannot tell (the intervals overlap)``."""
        if self.word == "cannot tell":
            return f"cannot tell ({self.why})"
        return f"{self.word} {what}"


def compare(a: Spread, b: Spread) -> Verdict:
    """``a`` against ``b`` (lower is better): less or more only where their intervals do not
    overlap; a side with one seed has no interval, and where neither side's seeds reached the
    target there is nothing to compare."""
    if a.n == 0 or b.n == 0:
        return Verdict("cannot tell", "a figure is unknown")
    if not a.has_interval or not b.has_interval:
        return Verdict("cannot tell", "one seed has no interval: run more seeds")
    if math.isinf(a.low) and math.isinf(b.low):
        return Verdict("cannot tell", "no seed of either reached the target")
    if a.high < b.low:
        return Verdict("less")
    if a.low > b.high:
        return Verdict("more")
    return Verdict("cannot tell", "the intervals overlap")


def same_but(
    row: pd.Series | dict[str, Any], dropped: Callable[[str], bool], energy: bool = True
) -> str:
    """A row's identity (the settings that define its configuration) without the settings
    ``dropped`` names and without its seed, with its hardware and (``energy``) its energy
    label: rows with the same key differ only in what was dropped."""
    identity = identity_of(row["settings"], str(row["workload"]))
    kept = {k: v for k, v in identity.items() if k != SEED and not dropped(k)}
    parts = [json.dumps(kept, sort_keys=True, default=str), str(row["device_type"])]
    return "|".join([*parts, str(row["energy"])] if energy else parts)


def _energy_note(label: str) -> str:
    return f" (energy: {label}" + (f"; {ESTIMATE_FOLLOWS_TIME})" if label == "estimate" else ")")


def basis(*rows: pd.Series) -> str:
    """What a verdict over ``rows`` stands on: 95 % CIs where each has enough seeds, else the
    min–max ranges of few seeds, which is said (a weak test, not a CI)."""
    n = min(int(r["n_seeds"]) for r in rows)
    kind = interval_for(n).kind
    if kind == "ci":
        return "judged on 95 % CIs of the medians over seeds"
    if kind == "range":
        return f"judged on the min–max ranges of as few as {n} seeds: not CIs, a weak test"
    return "one seed: no interval to judge on"


def _figures(row: pd.Series, unit_time: str = "s", unit_energy: str = "J") -> str:
    best = float(row["best_not_reached"])
    return (
        f"{cell(spread(row, 'seconds_to_target'), best, unit_time)}, "
        f"{cell(spread(row, 'energy_to_target_j'), best, unit_energy)}, "
        f"reached {row['n_reached']}/{row['n_seeds']} seeds"
        + (f" ({CONTENDED}: a seed ran on a shared machine)" if row["contended"] else "")
    )


# ------------------------------------------------------------------------------ families


@dataclass(frozen=True, slots=True)
class FamilyFinding:
    """Single-rank configurations differing only in their model family: who reaches the
    target first and with the least energy (None: cannot tell, with why)."""

    described: str
    energy: str
    rows: pd.DataFrame
    first: str | None
    first_why: str
    leanest: str | None
    leanest_why: str

    def lines(self) -> list[str]:
        """The finding as Markdown list items."""
        first = (
            f"**{self.first}** reaches the target first"
            if self.first
            else f"cannot tell which family reaches the target first ({self.first_why})"
        )
        leanest = (
            f"**{self.leanest}** with the least energy"
            if self.leanest
            else f"cannot tell which with the least energy ({self.leanest_why})"
        )
        rows = [r for _, r in self.rows.iterrows()]
        out = [
            f"- {self.described}: {first}; {leanest}{_energy_note(self.energy)}; {basis(*rows)}."
        ]
        for r in self.rows.itertuples():
            out.append(f"  - {r.model_family}: {_figures(pd.Series(r._asdict()))}")
        return out


def winner(spreads: dict[str, Spread]) -> tuple[str | None, str]:
    """The one whose interval lies wholly below every other's, or None and why not."""
    known = {k: s for k, s in spreads.items() if s.n}
    if len(known) < 2:
        return None, "fewer than two have the figure"
    best = min(known, key=lambda k: (known[k].median, known[k].high))
    verdicts = [compare(known[best], s) for k, s in known.items() if k != best]
    if all(v.word == "less" for v in verdicts):
        return best, ""
    return None, "; ".join(dict.fromkeys(v.why for v in verdicts if v.word != "less"))


def family_findings(board: pd.DataFrame) -> list[FamilyFinding]:
    """`FamilyFinding` for every set of single-rank, full-model configurations that differ
    only in their model family (module docstring)."""
    rows = (
        board[(board["devices"] == 1) & ~board["partial_model"].astype(bool)]
        if len(board)
        else board
    )
    if rows.empty:
        return []
    keys = [same_but(r, FAMILY_KEYS.__contains__) for _, r in rows.iterrows()]
    out = []
    for _, group in rows.assign(_key=keys).groupby("_key", sort=False):
        group = group.drop_duplicates("model_family", keep="last")
        if len(group) < 2:
            continue
        families = list(group["model_family"])
        time = {r["model_family"]: spread(r, "seconds_to_target") for _, r in group.iterrows()}
        energy = {r["model_family"]: spread(r, "energy_to_target_j") for _, r in group.iterrows()}
        first, first_why = winner(time)
        leanest, leanest_why = winner(energy)
        name = re.sub(r"^[^/ ]+/", "", str(group["config_name"].iloc[-1]))
        out.append(
            FamilyFinding(
                f"{' vs '.join(families)}, {name} on {group['device_type'].iloc[-1]}",
                str(group["energy"].iloc[-1]),
                group.drop(columns="_key").reset_index(drop=True),
                first, first_why, leanest, leanest_why,
            )
        )  # fmt: skip
    return out


# ------------------------------------------------------------------------------ SkipPipe


def schedule_of(settings: dict[str, Any]) -> str:
    """A SkipPipe configuration's schedule (its default where the settings lack it)."""
    sp = SCHEMA.config(settings).skippipe
    return str(sp.schedule if sp is not None else SkipPipeSettings().schedule)


@dataclass(frozen=True, slots=True)
class SkipFinding:
    """SkipPipe against the straggler-aware full pipeline under one setting and straggler:
    whether it reaches the target with less time and less energy."""

    described: str
    condition: str
    energy: str
    skippipe: pd.Series
    aware: pd.Series
    time: Verdict
    joules: Verdict

    def lines(self) -> list[str]:
        """The finding as Markdown list items."""
        if self.time.word == self.joules.word and self.time.word != "cannot tell":
            said = f"**{self.time.word} time and {self.joules.word} energy**"
        else:
            said = f"**{self.time.text('time')}**, **{self.joules.text('energy')}**"
        skip = f"SkipPipe skip={float(self.skippipe['settings'].get(SKIP, math.nan)):g}"
        return [
            f"- {self.described}, {self.condition}: {skip} reaches the target with {said} than "
            f"the straggler-aware full pipeline{_energy_note(self.energy)}; "
            f"{basis(self.skippipe, self.aware)}.",
            f"  - SkipPipe: {_figures(self.skippipe)}",
            f"  - straggler-aware full pipeline: {_figures(self.aware)}",
        ]


def skippipe_findings(board: pd.DataFrame) -> list[SkipFinding]:
    """`SkipFinding` for every SkipPipe configuration with a straggler-aware full pipeline
    trained to the target under the same settings (module docstring)."""
    rows = board[board["strategy"] == "skippipe"] if len(board) else board
    if rows.empty:
        return []
    rows = rows.assign(
        _schedule=[schedule_of(s) for s in rows["settings"]],
        _key=[same_but(r, lambda k: k in (SCHEDULE, SKIP)) for _, r in rows.iterrows()],
    )
    out = []
    for _, group in rows.groupby("_key", sort=False):
        aware = group[group["_schedule"] == AWARE]
        if aware.empty:
            continue
        base = aware.iloc[-1]
        for _, r in group[group["_schedule"] == SKIPPIPE].iterrows():
            name = re.sub(r"skippipe\[[^\]]*\]", "skippipe", str(r["config_name"]))
            out.append(
                SkipFinding(
                    f"{name} on {r['device_type']}", condition(r["settings"]), str(r["energy"]),
                    r, base,
                    compare(spread(r, "seconds_to_target"), spread(base, "seconds_to_target")),
                    compare(spread(r, "energy_to_target_j"), spread(base, "energy_to_target_j")),
                )
            )  # fmt: skip
    return out


# ------------------------------------------------------------------------------ DDP/FSDP/ODC


@dataclass(frozen=True, slots=True)
class CurveFinding:
    """DDP/FSDP/ODC of one setting: the largest difference of their validation losses at equal
    steps, where it was (seed, repeat, step, the two strategies), over how many shared points."""

    described: str
    strategies: tuple[str, ...]
    n_seeds: int
    n_points: int
    largest: float
    relative: float
    seed: Any
    repeat: int
    step: int
    pair: tuple[str, str]

    @property
    def agree(self) -> bool:
        """Whether the largest difference is within rounding (`SAME_LOSS_RTOL`)."""
        return self.relative <= SAME_LOSS_RTOL

    def lines(self) -> list[str]:
        """The finding as a Markdown list item."""
        if self.largest == 0:
            return [
                f"- {self.described}, {' / '.join(self.strategies)}: their validation losses "
                f"are identical at all {self.n_points} shared evaluations of {self.n_seeds} "
                "seed(s): they train the same model."
            ]
        where = (
            f"at step {self.step} (seed {self.seed}, repeat {self.repeat}, {self.pair[0]} "
            f"against {self.pair[1]})"
        )
        judged = (
            f"within rounding (≤ {SAME_LOSS_RTOL:g} of the loss): they train the same model"
            if self.agree
            else f"more than one step's rounding ({SAME_LOSS_RTOL:g} of the loss): rounding "
            "compounds over steps, or the strategies do not train the same model; look at "
            "their curves"
        )
        return [
            f"- {self.described}, {' / '.join(self.strategies)}: the largest difference of "
            f"their validation losses at equal steps is {self.largest:.3g} nats "
            f"({self.relative:.2g} of the loss) {where}, over {self.n_points} shared "
            f"evaluations of {self.n_seeds} seed(s): {judged}."
        ]


def curve_findings(seeds: pd.DataFrame, curves: pd.DataFrame) -> list[CurveFinding]:
    """`CurveFinding` for every setting trained to a target by two or more of DDP, FSDP and
    ODC (``seeds``: `to_target.seed_rows`; ``curves``: their validation curves), comparing
    runs of the same seed, repeat by repeat, at the steps both evaluated."""
    runs = seeds[seeds["strategy"].isin(DATA_PARALLEL)] if len(seeds) else seeds
    if runs.empty or curves.empty:
        return []
    runs = runs.assign(
        _key=[same_but(r, STRATEGY_KEYS.__contains__, energy=False) for _, r in runs.iterrows()],
        _seed=runs["seed"].map(lambda s: -1 if s is None or pd.isna(s) else s),
    )
    merged = curves.merge(
        runs[["run_id", "_key", "_seed", "strategy", "config_name", "devices", "device_type"]],
        on="run_id",
    )
    out = []
    for _, group in merged.groupby("_key", sort=False):
        if group["strategy"].nunique() < 2:
            continue
        wide = group.pivot_table(
            index=["_seed", "repeat", "step"], columns="strategy", values="val_loss",
            aggfunc="last",
        )  # fmt: skip
        wide = wide[wide.notna().sum(axis=1) >= 2]
        if wide.empty:
            continue
        gap = wide.max(axis=1) - wide.min(axis=1)
        at = gap.idxmax()
        there = wide.loc[at].dropna()
        strategies = tuple(s for s in DATA_PARALLEL if s in set(group["strategy"]))
        name = re.sub(r"\b(?:ddp|fsdp|odc)×(\d+)", r"\1 ranks", str(group["config_name"].iloc[-1]))
        out.append(
            CurveFinding(
                f"{name} on {group['device_type'].iloc[-1]}", strategies,
                int(wide.index.get_level_values("_seed").nunique()), len(wide), float(gap[at]),
                float(gap[at]) / max(abs(float(there.mean())), 1e-12), at[0], int(at[1]),
                int(at[2]), (str(there.idxmin()), str(there.idxmax())),
            )
        )  # fmt: skip
    return out
