"""What greenbench itself cost each run (``runs.harness_*``): stored after a tiny real run, the
second configuration of a session reusing the first's quiet idle baseline and CPU peak, and
shown by `greenbench show`. The launcher's idle sample is faked at its boundary (a quiet
machine, 1 W: below any run's mean power, so no run proves it stale) and so is the GEMM, so the
test holds on a busy machine; no timing is asserted beyond order and sign."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from helpers import QUICK

from greenbench.cli import main
from greenbench.energy.base import Meter
from greenbench.hardware import cpu_peak
from greenbench.launcher import idle
from greenbench.launcher.launch import run_specs
from greenbench.spec import expand
from greenbench.store import read_frame

COLUMNS = ("harness_startup_s", "harness_ranks_s", "harness_calibration_s",
           "harness_baseline_s", "idle_baseline_age_s", "harness_teardown_s")  # fmt: skip


class QuietWatch:
    def __enter__(self) -> QuietWatch:
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.contended, self.others_busy_cores, self.seen = False, 0.0, ""
        return False


@pytest.mark.slow
def test_a_tiny_run_stores_what_the_harness_cost_and_the_next_reuses_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path / "cache"))  # a cold machine
    monkeypatch.setattr(cpu_peak, "_GEMM_CACHE", {})
    monkeypatch.setattr(cpu_peak, "_GEMM_RECORDS", {})
    monkeypatch.setattr(cpu_peak, "_measure_gemm_flops", lambda dtype, budget_s: 1e15)
    monkeypatch.setattr(idle, "ContentionWatch", QuietWatch)
    monkeypatch.setattr(Meter, "idle_power_w", lambda self, seconds=1.0: time.sleep(seconds) or 1.0)
    specs = [expand("transformer-vs-mamba", [{**QUICK, "energy.idle_s": 0.2, "seed": seed}])[0]
             for seed in (0, 1)]  # fmt: skip
    db = tmp_path / "r.duckdb"
    assert run_specs(specs, db).statuses == ["ok", "ok"]
    rows = read_frame(db, f"SELECT {', '.join(COLUMNS)} FROM runs ORDER BY started_at")
    first, second = rows.to_dict("records")
    for run in (first, second):
        assert 0 < run["harness_ranks_s"] < run["harness_startup_s"]  # the ranks' share
        assert run["harness_teardown_s"] >= 0
    assert first["harness_calibration_s"] > 0 and second["harness_calibration_s"] == 0
    assert first["harness_baseline_s"] >= 0.2 and pd.isna(first["idle_baseline_age_s"])
    assert second["harness_baseline_s"] == 0 and second["idle_baseline_age_s"] > 0  # reused

    run_id = read_frame(db, "SELECT run_id FROM runs ORDER BY started_at").run_id.iloc[1]
    shown = CliRunner().invoke(main, ["show", run_id, "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    (line,) = [ln for ln in shown.output.splitlines() if ln.startswith("harness:")]
    assert "before the first step" in line and "peak calibration cached" in line
    assert "reused, taken quiet" in line and "after the last window" in line
