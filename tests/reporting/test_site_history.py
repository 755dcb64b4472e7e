"""greenbench.reporting.site.history: a published history page over runs stored without a git
sha (one point per day, never one "unknown" commit) and runs under two labels (a line each)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from greenbench.reporting.site import charts
from greenbench.reporting.site.history import Entry, history_frame, page, table_lines

T0 = datetime(2026, 3, 1, 2)
ENTRY = Entry("k", "rapl", "transformer/tiny", "measured (rapl)", "w", "history/k.html")


def _rows(run_id: str, day: int, jpt: float, *, sha: str | None, label: str | None) -> list[dict]:
    return [
        {"run_id": run_id, "config_key": "k", "energy_source": "rapl", "energy_measured": True,
         "git_sha": sha, "label": label, "started_at": T0 + timedelta(days=day, minutes=r),
         "repeat": r, "tokens": 1000, "co2_g": 0.1, "nproc": 1, "nnodes": 1,
         "joules_per_token": jpt, "net_joules_per_token": jpt / 2, "tokens_per_s": 100.0}
        for r in range(3)
    ]  # fmt: skip


def test_runs_without_a_sha_are_one_point_per_day() -> None:
    rows = pd.DataFrame(
        _rows("a", 0, 1.0, sha=None, label="nightly")
        + _rows("b", 0, 1.2, sha=None, label="nightly")
        + _rows("c", 1, 1.1, sha=None, label="nightly")
    )
    hist = history_frame(rows, ENTRY)
    assert hist.attrs["by"] == "date" and hist["point"].tolist() == ["2026-03-01", "2026-03-02"]
    assert hist["n_runs"].tolist() == [2, 1]  # the first day's two runs are one point
    shown = page(ENTRY, hist, "site").render()
    assert "one point per day" in shown and "Only one" not in shown
    assert table_lines(hist)[2].startswith("| `unknown` | 2026-03-01 02:00 |")


def test_two_labels_of_one_commit_are_two_lines() -> None:
    rows = pd.DataFrame(
        _rows("a", 0, 1.0, sha="s1", label="nightly")
        + _rows("b", 0, 2.0, sha="s1", label="experiment")
        + _rows("c", 1, 1.1, sha="s2", label="nightly")
    )
    hist = history_frame(rows, ENTRY)
    assert hist.attrs["by"] == "commit" and len(hist) == 3
    lines = set(hist["line"])
    assert lines == {"measured (rapl) · nightly", "measured (rapl) · experiment"}
    spec = charts.history_chart(hist, "joules_per_token", "J/token").to_dict()
    assert {layer["encoding"]["color"]["field"] for layer in spec["layer"]} == {"line"}
    assert {r.split(" | ")[-2] for r in table_lines(hist)[2:]} == {"nightly", "experiment"}
