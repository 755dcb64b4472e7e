"""The power-limit workload end to end, on an emulated H100 (``emulate.gpu=h100``: CPU ranks
standing in for GPUs whose NVML is greenbench's power model, greenbench.hardware.nvml_model):
the four limits stored with their watts and power, every result labelled as the model's, the
original limit restored, the report's Pareto drawn and its knee named, nothing of it on the
leaderboard of measurements."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.hardware.nvml_model import emulated_nvml
from greenbench.running.power_limits import Journal
from greenbench.store import read_frame
from greenbench.vocabulary import EMULATED_SOURCE

SETTINGS = {
    "emulate.gpu": "h100",
    "model.family": "transformer",  # one family of the workload's two: four runs, not eight
    "model.size": "tiny",
    "data.seq_len": 64,
    "data.global_batch": 2,
    "data.micro_batch": 1,
    "train.warmup_steps": 1,
    "train.steps": 2,
    "train.min_window_s": 0.5,
    "energy.idle_s": 0.2,
    "repeats": 1,
}


@pytest.mark.slow
def test_the_power_limit_workload_on_an_emulated_gpu(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path / "cache"))
    db = tmp_path / "r.duckdb"
    args = ["run", "--workload", "power-limit", "--db", str(db)]
    for key, value in SETTINGS.items():
        args += ["--set", f"{key}={value}"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output

    runs = read_frame(
        db,
        "SELECT r.config_name, r.device_type, r.power_limit_w, r.power_limit_default_w, "
        "r.power_limit_via, x.energy_source, x.energy_measured, x.gpu_power_avg_w, "
        "x.gpu_power_peak_w, x.joules_per_token, x.tokens_per_s FROM runs r JOIN results x "
        "USING (run_id) WHERE r.status = 'ok' ORDER BY r.power_limit_w DESC",
    )
    assert list(runs["power_limit_w"]) == [700, 595, 490, 385]  # 1.0, 0.85, 0.7, 0.55 × 700 W
    assert set(runs["power_limit_default_w"]) == {700} and set(runs["power_limit_via"]) == {
        "emulated"
    }
    assert set(runs["energy_source"]) == {EMULATED_SOURCE}  # the model's, never a measurement
    assert not runs["energy_measured"].any()
    assert set(runs["device_type"]) == {"emulated:H100 SXM"}
    assert all("limit=" in name and "emulated-h100" in name for name in runs["config_name"])
    # no device drew more than its limit
    assert (runs["gpu_power_peak_w"] <= runs["power_limit_w"] + 1e-6).all()
    assert (runs["gpu_power_avg_w"] <= runs["power_limit_w"] + 1e-6).all()

    assert emulated_nvml("h100").limits_w() == [700.0] * 8  # the original limit, restored
    assert Journal().entries() == []

    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["report", "--db", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = (out / "README.md").read_text()
    assert (out / "power-limits.png").stat().st_size > 10_000
    assert "## GPU power limits: time against energy" in text
    assert "**Knee: " in text and "Zeus's GlobalPowerLimitOptimizer would choose" in text
    assert "These figures come from a model, not a measurement" in text
    assert "No measured configuration" in text  # never on the leaderboard of measurements
