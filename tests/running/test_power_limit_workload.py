"""The power-limit workload end to end, on an emulated H100 (``emulate.gpu=h100``: CPU ranks
standing in for GPUs whose NVML is greenbench's power model, greenbench.hardware.nvml_model):
the four limits stored with their watts and power, every result labelled as the model's, the
original limit restored, the report's Pareto drawn and its knee named, nothing of it on the
leaderboard of measurements. The node's own meter is read beside the devices through
``ipmitool dcmi power reading``, faked at the command boundary (a script of that name on PATH,
which the ranks inherit), and stored as ``energy_node_j``, never in ``energy_j``."""

from __future__ import annotations

import os
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
    "energy.node": "ipmi",
    "energy.node_poll_s": 0.1,
}
#: ``ipmitool dcmi power reading`` as ipmitool prints it (lib/ipmi_dcmi.c)
DCMI = """
    Instantaneous power reading:                   935 Watts
    Minimum during sampling period:                 48 Watts
    Maximum during sampling period:               1304 Watts
    Average power reading over sample period:      901 Watts
    IPMI timestamp:                           Thu Feb 15 08:36:01 2024
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated
"""


def fake_ipmitool(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "dcmi.txt").write_text(DCMI)
    tool = bin_dir / "ipmitool"
    tool.write_text(f"#!/bin/sh\ncat {tmp_path}/dcmi.txt\n")
    tool.chmod(0o755)
    return bin_dir


@pytest.mark.slow
def test_the_power_limit_workload_on_an_emulated_gpu(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{fake_ipmitool(tmp_path)}:{os.environ['PATH']}")
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
        "x.gpu_power_peak_w, x.joules_per_token, x.tokens_per_s, x.seconds, x.energy_j, "
        "x.energy_node_j, x.energy_node_source FROM runs r JOIN results x "
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

    # the node's own meter, beside the devices' energy and never in it
    assert set(runs["energy_node_source"]) == {"ipmi"}
    for r in runs.itertuples():
        assert r.energy_node_j == pytest.approx(935 * r.seconds, rel=0.2)
        assert r.energy_j < r.energy_node_j  # one emulated GPU, ≤ 700 W, of a 935 W node

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
