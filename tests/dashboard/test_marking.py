"""greenbench.dashboard_app.marking: how numbers and energy labels are written in the app."""

from __future__ import annotations

import pandas as pd

from greenbench.dashboard_app.marking import fmt


def test_a_missing_value_of_a_nullable_column_reads_as_a_dash():
    assert fmt(pd.NA) == fmt(None) == fmt(float("nan")) == "–"
    assert fmt(pd.array([2048], dtype="Int64")[0]) == "2,048"
