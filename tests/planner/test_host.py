"""The CPU host as the planner's device: cores per rank, facts and figures from its stored runs,
the calibration per core, and its runs set against the prediction by their tensor-counted model
state (fixtures: ``conftest.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.errors import SpecError
from greenbench.models import model_preset
from greenbench.planner.calibrate import calibrate, fit, stored_runs
from greenbench.planner.command import host_model
from greenbench.planner.cost import predict
from greenbench.planner.host import (
    ASSUMED_BYTES_PER_S,
    HOST,
    cores_per_rank,
    host_device,
    host_facts,
)
from greenbench.planner.measured import measured_layouts

TINY = model_preset("transformer", "tiny")


@pytest.mark.parametrize(
    ("cores", "ranks", "share"),
    [(2, 1, 2.0), (2, 2, 1.0), (2, 4, 0.5), (2, 3, 2 / 3), (16, 4, 4.0), (16, 3, 5.0)],
)
def test_a_rank_computes_on_its_threads_or_its_quota(cores: int, ranks: int, share: float):
    assert cores_per_rank(cores, ranks) == pytest.approx(share)


def test_facts_come_from_the_stored_runs(cpu_db: Path) -> None:
    facts = host_facts(stored_runs(cpu_db, HOST))
    assert facts.device_type == "cpu:Test CPU" and facts.cores == 2
    assert facts.memory_bytes == 8e9
    assert facts.gemm_flops_per_core == pytest.approx(1e11)  # per thread, whatever the ranks
    assert facts.tdp_w > 0 and facts.tdp_source


def test_an_uncalibrated_host_says_what_it_assumes(cpu_db: Path) -> None:
    facts = host_facts(stored_runs(cpu_db, HOST))
    four = host_device(facts, 4)
    assert four.sustained_flops == pytest.approx(0.6 * 1e11 * 0.5)  # half a core each
    assert four.fast == four.network and four.fast.beta_s_per_byte == 1 / ASSUMED_BYTES_PER_S
    assert four.overlapped == frozenset({"dp_replicate"})
    assert four.memory_bytes == 2e9 and four.fast_domain == 4
    assert four.power.busy_w == pytest.approx(facts.tdp_w / 4)
    assert four.power.idle_w == pytest.approx(facts.tdp_w / 40)
    assert "assumed" in four.sources["sustained FLOP/s"]
    assert "assumed" in four.sources["fast link"] and "assumed" in four.sources["busy power"]
    with pytest.raises(SpecError, match="GPU power limit"):
        host_device(facts, 4, power_limit_w=100)


def test_calibration_fits_per_core_and_leaves_ddp_tails_out(cpu_db: Path, cpu_truth) -> None:
    c = calibrate(cpu_db, HOST)
    assert c.sustained_flops == pytest.approx(cpu_truth.per_core)
    # FSDP at 2 ranks (a core each) and 4 (half a core each, twice as slow): α, β per core
    assert c.fast.alpha_s == pytest.approx(cpu_truth.alpha_s, rel=1e-6)
    assert c.fast.beta_s_per_byte == pytest.approx(cpu_truth.beta, rel=1e-6)
    # no measured energy: no power; the LongAlign run's rows are not full: no family rate
    assert c.runs == {"fast": 2, "sustained_flops": 5, "transformer FLOP/s": 4,
                      "process_overhead_b": 4}  # fmt: skip
    assert c.busy_w is None and not c.notes
    facts = host_facts(stored_runs(cpu_db, HOST))
    four = host_device(facts, 4, calibration=c)
    assert four.sustained_flops == pytest.approx(cpu_truth.per_core / 2)
    assert four.fast.alpha_s == pytest.approx(2 * cpu_truth.alpha_s)  # half a core: twice as
    assert four.fast.beta_s_per_byte == pytest.approx(2 * cpu_truth.beta)  # long to move bytes
    assert "fitted from 5 stored runs" in four.sources["sustained FLOP/s"]


def test_one_message_size_fits_bandwidth_alone(tmp_path: Path, cpu_runs_writer, cpu_truth):
    runs = cpu_truth.runs[:1]  # FSDP at 2 ranks: every call the same size, over one group size
    db = cpu_runs_writer(tmp_path / "one-size.duckdb", runs=runs)
    c = calibrate(db, HOST)
    assert c.fast.alpha_s == 0.0 and c.fast.beta_s_per_byte > cpu_truth.beta  # latency folded in
    assert "bandwidth only" in c.notes["fast"]
    device = host_device(host_facts(stored_runs(db, HOST)), 2, calibration=c)
    assert "bandwidth only" in device.sources["fast link"]


def test_a_subset_of_runs_fits_alone(cpu_db: Path, cpu_truth) -> None:
    single = [r for r in stored_runs(cpu_db, HOST) if r["strategy"] == "single"]
    c = fit(single)
    assert c.fast is None and c.sustained_flops == pytest.approx(cpu_truth.per_core)
    assert fit([]).runs == {}


def test_cpu_runs_are_scored_on_model_state_not_resident_memory(cpu_db: Path, cpu_truth):
    facts = host_facts(stored_runs(cpu_db, HOST))
    device = host_device(facts, 2, calibration=calibrate(cpu_db, HOST))
    found = {m.run_id: m for m in measured_layouts(cpu_db, TINY, 2, device)}
    assert set(found) == {"cccc00000001", "cccc00000003"}  # longalign rows are not full
    m = found["cccc00000001"]
    assert m.peak_mem_bytes is None  # a CPU process's resident set is not the model's figure
    assert m.state_bytes == 2_000_000
    assert m.step_s == pytest.approx(cpu_truth.window_s / cpu_truth.steps)
    assert m.memory_bytes == (2_000_000, m.predicted.memory.model_state_b)
    e = m.errors()
    assert e["state_bytes"] == pytest.approx(m.predicted.memory.model_state_b / 2_000_000 - 1)
    assert e["memory"] == e["state_bytes"] and e["peak_mem_bytes"] is None
    assert e["step_s"] == pytest.approx(m.predicted.step_s / 2.0 - 1)
    assert m.predicted == predict(TINY, m.layout, m.batch, device)


def test_the_host_needs_its_runs(cpu_db: Path, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="pass --db"):
        host_model(None, 2, "fp32")
    with pytest.raises(SpecError, match="no CPU run of this host"):
        host_model(cpu_db, 2, "fp32", host="elsewhere")
    assert host_model(cpu_db, 2, "fp32", calibrate=True).sustained_flops == pytest.approx(80e9)


def test_plan_for_the_host_through_the_cli(cpu_db: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["plan", "--model-family", "transformer", "--size", "tiny", "--devices", "2",
         "--device-type", "host", "--seq-len", "256", "--global-batch", "8", "--precision",
         "fp32", "--db", str(cpu_db), "--calibrate"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "transformer/tiny on 2 × cpu:Test CPU" in out
    assert "GFLOP/s" in out and "fitted from 5 stored runs" in out
    assert "cccc00000001" in out and "cccc00000004" not in out  # longalign not compared
