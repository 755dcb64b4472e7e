"""The power-limit workload end to end, on an emulated H100 (``emulate.gpu=h100``: CPU ranks
standing in for GPUs whose NVML is greenbench's power model, greenbench.hardware.nvml_model):
the four limits stored with their watts and power, every result labelled as the model's, the
original limit restored, the report's Pareto drawn and its knee named, nothing of it on the
leaderboard of measurements. The node's own meter is read beside the devices through
``ipmitool dcmi power reading``, faked at the command boundary (a script of that name on PATH,
which the ranks inherit), and stored as ``energy_node_j``, never in ``energy_j``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.hardware.gpu_model import MAX_SM_CLOCK_MHZ
from greenbench.hardware.nvml_model import emulated_nvml
from greenbench.launcher.power_limits import Journal
from greenbench.reporting.limit_sweep import COLUMNS, sweeps
from greenbench.reporting.repeats import read_repeats
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
    # no device drew more than its limit (busy at it below 630 W: within the counter's 1 mJ)
    assert (runs["gpu_power_peak_w"] <= runs["power_limit_w"] + 1e-6).all()
    assert (runs["gpu_power_avg_w"] <= runs["power_limit_w"] + 1e-2).all()

    # the node's own meter, beside the devices' energy and never in it
    assert set(runs["energy_node_source"]) == {"ipmi"}
    for r in runs.itertuples():
        # the node's meter reads the wall clock, which keeps pace with the model's time (the
        # rank sleeps out what is left of each step) or runs past it where the CPU is slower
        assert r.energy_node_j >= 935 * r.seconds * 0.8
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
    assert "**No measured leaderboard.**" in text  # never on the leaderboard of measurements


def sm_clock_mhz(limit_w: float) -> int:
    """The emulated H100's SM clock under ``limit_w``, as its NVML reports it."""
    nv = emulated_nvml("h100")
    h = nv.nvmlDeviceGetHandleByIndex(7)  # a device no run uses
    nv.nvmlDeviceSetPowerManagementLimit(h, round(limit_w * 1000))
    try:
        return nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
    finally:
        nv.nvmlDeviceSetPowerManagementLimit(h, 700_000)


@pytest.mark.slow
def test_an_emulated_sweep_beside_two_busy_loops_follows_its_model(tmp_path, monkeypatch):
    """Two busy loops share the 2-core machine for the whole sweep (started here, killed in the
    finally): every limit's time is still the model's multiple of the one base step the default
    limit measured, so time never falls with the limit and the sweep is not flagged; the base
    says it was measured under load."""
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path / "cache"))
    db = tmp_path / "r.duckdb"
    settings = {**SETTINGS, "energy.node": "off", "repeats": 1, "train.warmup_steps": 2,
                "train.min_window_s": 0.3}  # fmt: skip
    args = ["run", "--workload", "power-limit", "--db", str(db)]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(2)]
    try:
        result = CliRunner().invoke(main, args)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert result.exit_code == 0, result.output

    rows = read_frame(
        db,
        "SELECT r.power_limit_w, x.repeat, x.tokens_per_s, x.joules_per_token, x.energy_note "
        "FROM runs r JOIN results x USING (run_id) WHERE r.status = 'ok' "
        "ORDER BY r.power_limit_w DESC, x.repeat",
    )
    assert list(rows["power_limit_w"]) == [700, 595, 490, 385]
    per_token_s = list(1 / rows["tokens_per_s"])
    assert per_token_s == sorted(per_token_s)  # non-decreasing as the limit falls
    full = rows[rows["power_limit_w"] == 700].iloc[0]
    for r in rows.itertuples():  # the model's multiple of one base step, in every repeat
        slowdown = MAX_SM_CLOCK_MHZ / sm_clock_mhz(r.power_limit_w)
        assert full.tokens_per_s / r.tokens_per_s == pytest.approx(slowdown, rel=1e-9)
        busy_w = min(r.power_limit_w, 630.0)  # 0.9 × 700 W, capped at the limit
        assert r.joules_per_token / full.joules_per_token == pytest.approx(
            busy_w / 630.0 * slowdown, rel=1e-3
        )
        assert "emulated GPU time" in r.energy_note and "at the default limit" in r.energy_note
        assert "while other processes kept" in r.energy_note  # the base's load, kept with it

    (sweep,) = sweeps(read_repeats(db, COLUMNS))
    assert sweep.consistent and sweep.knee_w == 490  # the model's knee: +8.7 % time at 490 W
