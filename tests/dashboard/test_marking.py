

def test_a_missing_value_of_a_nullable_column_reads_as_a_dash():
    import pandas as pd

    from greenbench.dashboard_app.marking import fmt

    assert fmt(pd.NA) == fmt(None) == fmt(float("nan")) == "–"
    assert fmt(pd.array([2048], dtype="Int64")[0]) == "2,048"
