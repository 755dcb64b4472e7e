"""FSDP2 in bf16 as the field runs it: float32 shards, bf16 gathers and compute, float32 gradient
reduction (no autocast). Two real gloo ranks through the CLI, against the float32 run."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers import QUICK

from greenbench.cli import main
from greenbench.store import read_frame


@pytest.mark.slow
def test_bf16_gathers_half_the_bytes_and_trains_the_same_model(tmp_path):
    db = tmp_path / "r.duckdb"
    quick = {**QUICK, "data.seq_len": 64, "data.global_batch": 4}
    for precision in ("fp32", "bf16"):
        args = ["run", "--workload", "data-parallel", "--device", "cpu", "--db", str(db)]
        settings = {**quick, "strategy": "fsdp", "data.lengths": "fixed", "precision": precision}
        for key, value in settings.items():
            args += ["--set", f"{key}={value}"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
    runs = read_frame(
        db,
        "SELECT r.run_id, r.precision, p.loss FROM runs r JOIN results p USING (run_id)",
    )
    comm = read_frame(
        db,
        "SELECT run_id, op, SUM(bytes) AS bytes, SUM(calls) AS calls FROM comm_records "
        "GROUP BY run_id, op",
    )
    by = {
        (precision, op): (b, c)
        for run_id, precision in runs[["run_id", "precision"]].values
        for rid, op, b, c in comm.values
        if rid == run_id
    }
    fp32_gather, bf16_gather = by[("fp32", "all_gather")], by[("bf16", "all_gather")]
    assert bf16_gather[1] == fp32_gather[1]  # the same calls …
    assert bf16_gather[0] == fp32_gather[0] // 2  # … moving bf16 parameters
    assert by[("bf16", "reduce_scatter")] == by[("fp32", "reduce_scatter")]  # float32 gradients
    loss = dict(runs[["precision", "loss"]].values)
    assert loss["bf16"] == pytest.approx(loss["fp32"], rel=2e-2)
