"""What the views of runs to a target loss read from the database: one row per repeat of every
ok run that trained to a target (``train.until = target``), and the validation curves.

The thin query layer under `greenbench.reporting.to_target` (pooling), the report's section
and the dashboard's Quality tab; everything they compute is done on the frames read here. A
database from before runs to a target were stored (no ``results.target_reached``, no
``val_curve`` table) reads as holding none: the views then show their empty states. A run's
``seed_group`` (runs that differ only in their seed share it) is the store's
(`greenbench.store.views.SEED_GROUP`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from greenbench.reporting.repeats import read_repeats
from greenbench.store import read_frame
from greenbench.store.views import TABLE_NAMES

#: what a repeat row to a target carries: its run's configuration and trust, and the repeat's
#: own figures (energy labelled by the meter that read it; ``target_loss`` the repeat's)
TARGET_ROW_COLUMNS = (
    "run_id", "config_key", "seed_group", "config_name", "config", "workload", "suite",
    "strategy", "model_family", "model_size", "nproc", "nnodes", "device_type", "precision",
    "seq_len", "lengths", "git_sha", "started_at", "contended", "simulated", "repeat",
    "energy_source", "energy_measured", "target_loss", "target_reached", "steps_to_target",
    "tokens_to_target", "seconds_to_target", "energy_to_target_j", "energy_to_target_net_j",
    "best_val_loss", "eval_s", "eval_energy_j",
)  # fmt: skip
#: the columns of a validation curve row (seconds and joules of training only)
CURVE_COLUMNS = ("run_id", "repeat", "step", "tokens", "seconds", "joules", "val_loss")


def target_rows(db_path: str | Path) -> pd.DataFrame:
    """One row per repeat of every ok run to a target (`TARGET_ROW_COLUMNS`), oldest first;
    empty (with those columns) where the database holds none or no file is there."""
    if not Path(db_path).exists():
        return pd.DataFrame(columns=list(TARGET_ROW_COLUMNS))
    rows = read_repeats(db_path, TARGET_ROW_COLUMNS)
    return rows[rows["target_reached"].notna()].reset_index(drop=True)


#: the validation curves of the runs a list (``?``) names
CURVES_SQL = (
    f"SELECT {', '.join(CURVE_COLUMNS)} FROM val_curve WHERE list_contains(?::VARCHAR[], run_id)"
    " ORDER BY run_id, repeat, step"
)


def curves(db_path: str | Path, run_ids: list[str]) -> pd.DataFrame:
    """The validation curves (`CURVE_COLUMNS`) of ``run_ids``, every repeat's; empty where the
    database keeps none (a schema from before them)."""
    if not run_ids or not Path(db_path).exists():
        return pd.DataFrame(columns=list(CURVE_COLUMNS))
    if "val_curve" not in set(read_frame(db_path, TABLE_NAMES)["table_name"]):
        return pd.DataFrame(columns=list(CURVE_COLUMNS))
    return read_frame(db_path, CURVES_SQL, [[str(r) for r in run_ids]])
