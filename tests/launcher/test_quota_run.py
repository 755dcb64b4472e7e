"""Per-rank CPU quotas in real runs: four ranks on this machine's cores each sit in a group of
cores ÷ 4, the run stores that it ran so, and the groups are gone after the run, after a failed
rank and after SIGTERM to the launcher. (The quota's effect on CPU time is measured in
test_cpu_quota.py with busy processes.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import beside_contention

from greenbench.launcher.cpu_quota import CGROUP_CPU_ROOT, PARENT_NAME, RankQuotas
from greenbench.launcher.launch import run_specs
from greenbench.spec import expand
from greenbench.store import get_run, read_frame

pytestmark = pytest.mark.slow

FOUR = {
    "device": "cpu",  # CPU quotas are for CPU ranks (GPU ranks own their devices)
    "model.family": "transformer",
    "strategy": "ddp",
    "nproc": 4,
    "data.seq_len": 32,
    "data.global_batch": 4,
    "data.micro_batch": 1,
    "train.warmup_steps": 1,
    "train.steps": 2,
    "train.min_window_s": 0.0,
    "energy.idle_s": 0.0,
    "repeats": 1,
    "emulate.rank_cpu_quota": "on",
}


@pytest.fixture(autouse=True)
def _cgroups_writable():
    with RankQuotas(1) as probe:
        if probe.warning:
            pytest.skip(probe.warning)


def groups_of(pid: int) -> list[Path]:
    parent = CGROUP_CPU_ROOT / PARENT_NAME
    return sorted(parent.glob(f"{pid}-*")) if parent.exists() else []


def test_four_ranks_run_under_quotas_and_leave_no_groups(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    summary = run_specs([expand("transformer-vs-mamba", [FOUR])[0]], db)
    assert summary.statuses == ["ok"]
    (run_id,) = read_frame(db, "SELECT run_id FROM runs")["run_id"]
    run = get_run(db, run_id)
    assert run["rank_cpu_quota"] is True and not beside_contention(run["warnings"])
    assert run["config"]["settings"]["emulate.rank_cpu_quota"] == "on"
    assert {r["rank"] for r in run["rank_results"]} == {0, 1, 2, 3}
    assert groups_of(os.getpid()) == []


def test_a_failed_rank_leaves_no_groups(tmp_path: Path):
    spec = expand("transformer-vs-mamba", [{**FOUR, "debug.fail_rank": 2}])[0]
    assert run_specs([spec], tmp_path / "r.duckdb").statuses == ["failed"]
    assert groups_of(os.getpid()) == []


def test_ranks_join_their_groups_and_sigterm_to_the_launcher_removes_them(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    args = [f"--set={k}={v}" for k, v in {**FOUR, "train.steps": 200}.items()]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "greenbench.cli", "run", "--workload", "transformer-vs-mamba",
         *args, "--db", str(db)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        quotas = wait_for_ranks_in_groups(launcher.pid, 4)
        # each rank's group gives it cores ÷ 4 of the machine
        share = (os.cpu_count() or 1) / 4
        assert all(q == pytest.approx(share, rel=0.02) for q in quotas), quotas
        launcher.send_signal(signal.SIGTERM)
        launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate()
    assert launcher.returncode != 0
    assert groups_of(launcher.pid) == []
    assert read_frame(db, "SELECT status FROM runs")["status"].tolist() == ["interrupted"]


def wait_for_ranks_in_groups(launcher_pid: int, n: int, timeout_s: float = 120.0) -> list[float]:
    """The CPU quotas (in cores) of the groups ``n`` worker processes of the launcher sit in."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        quotas = []
        for proc in psutil.Process(launcher_pid).children(recursive=True):
            try:
                if "greenbench.rank.worker" not in " ".join(proc.cmdline()):
                    continue
                line = next(
                    ln for ln in Path(f"/proc/{proc.pid}/cgroup").read_text().splitlines()
                    if ln.split(":")[1] == "cpu"
                )  # fmt: skip
            except (psutil.Error, OSError, StopIteration):
                continue
            group = CGROUP_CPU_ROOT / line.split(":", 2)[2].lstrip("/")
            if PARENT_NAME in group.parts:
                quota = int((group / "cpu.cfs_quota_us").read_text())
                quotas.append(quota / int((group / "cpu.cfs_period_us").read_text()))
        if len(quotas) == n:
            return quotas
        time.sleep(0.5)
    raise AssertionError(f"{n} ranks did not join their quota groups in {timeout_s} s")
