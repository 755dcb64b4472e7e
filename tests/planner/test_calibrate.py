"""Calibration from stored runs recovers the truths the synthetic runs were written with, and
measured layouts are set against their predictions (fixtures: ``conftest.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenbench.errors import SpecError
from greenbench.models import model_preset
from greenbench.planner.calibrate import calibrate, fit_link
from greenbench.planner.cost import Batch, predict
from greenbench.planner.device import device_model
from greenbench.planner.measured import measured_layouts


def test_fit_recovers_alpha_beta_flops_and_power(gpu_db: Path, truth) -> None:
    c = calibrate(gpu_db, "h100")
    assert c.fast.alpha_s == pytest.approx(truth.alpha_s, rel=1e-6)
    assert c.fast.beta_s_per_byte == pytest.approx(truth.beta_s_per_b, rel=1e-6)
    assert c.network is None  # every run was on one node
    assert c.sustained_flops == pytest.approx(truth.sustained)
    assert c.busy_w == pytest.approx(truth.busy_w) and c.idle_w == pytest.approx(truth.idle_w)
    # the A100 run is not an H100's; the estimated-energy run fits no power; DDP's records are
    # the exposed tail of its all-reduces, not transfers, so its run fits no link
    assert c.runs == {"fast": 2, "sustained_flops": 3, "busy_w": 2, "idle_w": 2,
                      "transformer FLOP/s": 3}  # fmt: skip
    assert c.process_overhead_b is None  # a GPU's peak allocated memory has none


def test_other_hosts_runs_are_not_this_hosts(tmp_path: Path, gpu_runs_writer, truth) -> None:
    db = gpu_runs_writer(tmp_path / "other.duckdb", host="elsewhere")
    with pytest.raises(SpecError, match="too little to calibrate: 0 ok H100 SXM"):
        calibrate(db, "h100")
    found = calibrate(db, "h100", host="elsewhere")
    assert found.sustained_flops == pytest.approx(truth.sustained)


def test_missing_database_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no results database"):
        calibrate(tmp_path / "none.duckdb", "h100")


def test_fit_link_needs_two_sizes_and_a_positive_beta() -> None:
    assert fit_link([(1.0, 1e6, 1.0)]) is None
    assert fit_link([(1.0, 1e6, 1.0), (2.0, 2e6, 2.0)]) is None  # proportional: α, β unknown
    assert fit_link([(1.0, 1e6, 1e-3), (1.0, 2e6, 0.5e-3)]) is None  # β < 0
    link = fit_link([(1.0, 0.0, 2e-5), (1.0, 1e6, 1e-3), (3.0, 1e6, 1.04e-3)])
    assert link.alpha_s == pytest.approx(2e-5) and link.beta_s_per_byte == pytest.approx(9.8e-10)
    clipped = fit_link([(1.0, 1e6, 1e-3), (1.0, 2e6, 2.1e-3)])  # α < 0 refitted at 0
    assert clipped.alpha_s == 0.0 and clipped.beta_s_per_byte > 0


def test_measured_layouts_carry_their_prediction_error(gpu_db: Path, truth) -> None:
    shape = model_preset("transformer", "1b")
    device = device_model("h100", "bf16")
    found = {m.run_id: m for m in measured_layouts(gpu_db, shape, 2, device)}
    assert set(found) == {"aaaa00000001", "aaaa00000002", "aaaa00000003"}  # not the A100's
    m = found["aaaa00000001"]
    assert m.batch == Batch(seq_len=2048, global_batch=16, micro_batch=8, precision="bf16")
    assert m.predicted == predict(shape, m.layout, m.batch, device)
    tokens_per_s = 2 * truth.tokens_per_rank / truth.window_s  # two ranks' tokens
    assert m.tokens_per_s == pytest.approx(tokens_per_s)
    mean_w = (1 - truth.wait) * truth.busy_w + truth.wait * truth.idle_w
    assert m.joules_per_token == pytest.approx(2 * mean_w / tokens_per_s)
    errors = m.errors()
    assert errors["tokens_per_s"] == pytest.approx(m.predicted.tokens_per_s / tokens_per_s - 1)
    assert errors["peak_mem_bytes"] == pytest.approx(m.predicted.memory.total_b / 30 / 2**30 - 1)
    estimated = found["aaaa00000003"]
    assert estimated.joules_per_token is None and estimated.errors()["joules_per_token"] is None


def test_no_device_type_other_than_the_tables(gpu_db: Path) -> None:
    with pytest.raises(SpecError, match="unknown device type"):
        calibrate(gpu_db, "tpu")


def test_an_a100_calibration_reads_only_the_a100_run(gpu_db: Path) -> None:
    c = calibrate(gpu_db, "a100")
    assert c.runs["sustained_flops"] == 1 and c.fast is None  # one size: α, β not separable


def test_record_dims_name_their_degrees() -> None:
    from greenbench.planner.calibrate import mesh_dims

    assert mesh_dims("tp") == ("tp",)
    assert mesh_dims("dp_shard") == ("dp_shard",)
    assert mesh_dims("dp_shard_cp") == ("dp_shard", "cp")  # the hybrid's flattened FSDP group
    assert mesh_dims("world") == () and mesh_dims("dp_shardx") == ()
