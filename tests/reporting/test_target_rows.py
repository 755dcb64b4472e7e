"""greenbench.reporting.target_rows: the repeats to a target and the validation curves read back
from a database the real Store wrote are the rows the views' pure functions are tested on; a
database from before runs to a target, or none at all, reads as holding none."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from target_helpers import TargetRun, as_rows, convergence_runs, curve_rows, write_db

from greenbench.reporting.target_rows import CURVE_COLUMNS, curves, target_rows

FIGURES = [
    "run_id", "seed_group", "repeat", "target_loss", "target_reached", "steps_to_target",
    "tokens_to_target", "seconds_to_target", "energy_to_target_j", "energy_to_target_net_j",
    "best_val_loss", "eval_s", "eval_energy_j", "energy_source", "energy_measured",
]  # fmt: skip


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    """The figures, one dtype each (the store's nullable integers as floats, NULL as NaN)."""
    out = frame[FIGURES].sort_values(["run_id", "repeat"]).reset_index(drop=True)
    numbers = [c for c in FIGURES[3:-2] if c != "target_reached"]
    out[numbers] = out[numbers].astype("Float64").astype(float)
    return out.astype({"target_reached": bool, "energy_measured": bool, "repeat": int})


def test_what_is_read_back_is_what_the_views_are_tested_on(tmp_path: Path):
    runs = [
        *convergence_runs(),
        TargetRun("mixed", {"seed": 9}, [(True, 10.0, 100.0, 0), (False, 30.0, 300.0, 4.2)]),
    ]
    db = write_db(tmp_path / "t.duckdb", runs)
    read = target_rows(db)
    pd.testing.assert_frame_equal(
        _sorted(read), _sorted(as_rows(runs)), check_dtype=False, check_exact=False
    )
    assert read["seed_group"].nunique() == len({r.seed_group for r in runs})
    ids = [r.run_id for r in runs if r.curve]
    got = curves(db, ids).sort_values(["run_id", "repeat", "step"]).reset_index(drop=True)
    want = curve_rows(runs).sort_values(["run_id", "repeat", "step"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_window_runs_and_older_databases_hold_no_runs_to_a_target(seeded_db: Path, tmp_path: Path):
    assert target_rows(seeded_db).empty
    assert list(curves(seeded_db, ["anything"]).columns) == list(CURVE_COLUMNS)
    assert target_rows(tmp_path / "missing.duckdb").empty
