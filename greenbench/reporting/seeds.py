"""Pooling over seeds: the runs of one seed group (a configuration run with several seeds,
``greenbench run --seeds``; `greenbench.settings.seed_group_of`) are one leaderboard row and one
comparison of `compare`, each seed's run one sample.

The repeats of one run share its seed (its initialisation and its data), so they are not
independent samples of what another seed would give: over a group that holds several seeds, an
interval or a test over the pooled repeats would take one seed's spread for the
configuration's. So where a group holds more than one seed (more than one ``config_key``), its
samples are its runs' medians, one per run; where it holds one seed, they are its repeats, as
before seeds were pooled. A figure to a target loss that a repeat lacks because it did not reach
the target counts as worse than every repeat that did (+inf, `greenbench.vocabulary.Metric`'s
``to_target``), so a run that misses its target never looks cheaper for it.

Rows without a seed group (a database or an export older than it, a run of a configuration
stored before seed groups were kept and not run since) take their ``config_key``: a group of
their own, as before.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from greenbench.vocabulary.trust import missing

SEED_GROUP = "seed_group"
#: what the rows must carry for a figure to target (`censored`)
REACHED = "target_reached"


def with_seed_group(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with a ``seed_group`` everywhere: their own, else their ``config_key``."""
    out = rows.copy()
    keys = out["config_key"] if "config_key" in out else pd.Series(None, index=out.index)
    if SEED_GROUP in out:
        known = out[SEED_GROUP].notna() & (out[SEED_GROUP].astype(str) != "")
        out[SEED_GROUP] = out[SEED_GROUP].where(known, keys)
    else:
        out[SEED_GROUP] = keys
    return out


def n_seeds(group: pd.DataFrame) -> int:
    """How many seeds (configurations, ``config_key``) a group's rows hold."""
    return int(group["config_key"].nunique()) if "config_key" in group else 1


def censored(group: pd.DataFrame, column: str, to_target: bool = False) -> pd.Series:
    """A column's values as numbers; for a figure ``to_target``, a repeat that did not reach
    the target (``target_reached`` false) is +inf rather than unknown."""
    values = pd.to_numeric(group[column], errors="coerce").astype(float)
    if to_target and REACHED in group:
        missed = group[REACHED].map(lambda v: not missing(v) and not bool(v))
        values = values.mask(missed.astype(bool), math.inf)
    return values


def samples(
    group: pd.DataFrame, column: str, *, per_run: bool, to_target: bool = False
) -> np.ndarray:
    """The samples a group gives of a column (module docstring): its runs' medians with
    ``per_run`` (the group, or the comparison it is a side of, holds several seeds), else its
    repeats; unknown values left out (a run whose repeats are all unknown gives none)."""
    values = censored(group, column, to_target)
    if per_run and "run_id" in group:
        values = values.groupby(group["run_id"], sort=False).median()
    xs = values.to_numpy(dtype=float, na_value=np.nan)
    return xs[~np.isnan(xs)]


def seeds_note(n: int) -> str:
    """What a row pooled over ``n`` seeds says of its samples ("" for one seed)."""
    return f"over {n} seeds: one sample per run (its median)" if n > 1 else ""
