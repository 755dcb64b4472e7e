"""What the views of runs to a target loss read from the database: one row per repeat of every
ok run that trained to a target (``train.until = target``), and the validation curves.

The thin query layer under `greenbench.reporting.to_target` (pooling), the report's section
and the dashboard's Quality tab; everything they compute is done on the frames read here. A
database from before runs to a target were stored (no ``results.target_reached``, no
``val_curve`` table) reads as holding none: the views then show their empty states. A run's
``seed_group`` (runs that differ only in their seed share it) reads as its ``config_key``
where the run stored none.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from greenbench.store import read_frame
from greenbench.store.views import STORED_COLUMNS, TABLE_NAMES

#: what a repeat row takes from ``runs``
RUN_COLUMNS = (
    "run_id", "config_key", "config_name", "config", "workload", "suite", "strategy",
    "model_family", "model_size", "nproc", "nnodes", "device_type", "precision", "seq_len",
    "lengths", "git_sha", "started_at", "contended", "simulated",
)  # fmt: skip
#: what it takes from ``results`` (the repeat's own energy source: a repeat's figure is
#: labelled by the meter that read it)
RESULT_COLUMNS = (
    "repeat", "energy_source", "energy_measured", "target_loss", "target_reached",
    "steps_to_target", "tokens_to_target", "seconds_to_target", "energy_to_target_j",
    "energy_to_target_net_j", "best_val_loss", "eval_s", "eval_energy_j",
)  # fmt: skip
#: every column of a target row, ``seed_group`` included
TARGET_ROW_COLUMNS = (*RUN_COLUMNS, "seed_group", *RESULT_COLUMNS)
#: the columns of a validation curve row (seconds and joules of training only)
CURVE_COLUMNS = ("run_id", "repeat", "step", "tokens", "seconds", "joules", "val_loss")


def _stored(db_path: str | Path) -> set[tuple[str, str]]:
    frame = read_frame(db_path, STORED_COLUMNS)
    return set(zip(frame["table_name"], frame["column_name"], strict=True))


def target_rows_sql(stored: set[tuple[str, str]]) -> str | None:
    """The query of `target_rows` over a database with ``stored`` (table, column) pairs; None
    where its results table holds no run to a target (a schema from before them)."""
    if ("results", "target_reached") not in stored:
        return None
    select = [f"r.{c}" if ("runs", c) in stored else f"NULL AS {c}" for c in RUN_COLUMNS] + [
        f"x.{c}" if ("results", c) in stored else f"NULL AS {c}" for c in RESULT_COLUMNS
    ]
    group = "r.seed_group" if ("runs", "seed_group") in stored else "NULL"
    select.insert(len(RUN_COLUMNS), f"coalesce({group}, r.config_key) AS seed_group")
    return (
        f"SELECT {', '.join(select)} FROM runs r JOIN results x USING (run_id)"
        " WHERE r.status = 'ok' AND x.target_reached IS NOT NULL"
        " ORDER BY r.started_at, x.repeat"
    )


def target_rows(db_path: str | Path) -> pd.DataFrame:
    """One row per repeat of every ok run to a target (`TARGET_ROW_COLUMNS`), oldest first;
    empty (with those columns) where the database holds none or no file is there."""
    if not Path(db_path).exists():
        return pd.DataFrame(columns=list(TARGET_ROW_COLUMNS))
    sql = target_rows_sql(_stored(db_path))
    if sql is None:
        return pd.DataFrame(columns=list(TARGET_ROW_COLUMNS))
    return read_frame(db_path, sql)


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
