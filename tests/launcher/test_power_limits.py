"""GPU power limits around a run (greenbench.launcher.power_limits): planned and refused before
anything runs, recorded before any change, restored at the end, after an exception, after
SIGINT/SIGTERM, and by the next command after a SIGKILL.

Real GPUs are faked at pynvml's boundary (tests/energy/test_power_limit.py's fake) and the
process's capabilities at /proc/self/status; end-to-end runs use an emulated GPU
(``emulate.gpu=h100``, greenbench.hardware.nvml_model), whose driver state lives in a file, as a
real driver's outlives the process that changed it. No real GPU is touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_nvml import USER_CAPS, nvml_fixture, status_file  # noqa: F401
from helpers import QUICK

from greenbench.cli import main
from greenbench.energy import power_limit
from greenbench.energy.power_limit import PowerLimitRefused
from greenbench.hardware.nvml_model import emulated_nvml
from greenbench.launcher import power_limits
from greenbench.launcher.power_limits import (
    Journal,
    LimitPlan,
    held_limit,
    plan_limits,
    restore_stale,
)
from greenbench.settings import spec_identity
from greenbench.settings.runspec import RunSpec
from greenbench.spec import expand


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private machine cache: the journal and the emulated GPUs' state live there."""
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def cuda_spec(**settings) -> RunSpec:
    """A resolved spec on CUDA device 0 (the launcher's view after resolve_spec)."""
    s = dict(expand("transformer-vs-mamba", [{**QUICK, "data.seq_len": 256}])[0].settings)
    s.update({"device": "cuda", "precision": "bf16"}, **settings)
    return RunSpec("transformer-vs-mamba", s)


def test_a_fraction_becomes_the_watts_applied_and_they_are_the_identity(nvml):
    specs, plans = plan_limits([cuda_spec(**{"gpu.power_limit_frac": 0.7}), cuda_spec()])
    assert specs[0]["gpu.power_limit_w"] == 490 and plans[0].watts == 490
    assert plans[0].via == "nvml" and plans[0].default_w == 700 and 1 not in plans
    given = plan_limits([cuda_spec(**{"gpu.power_limit_w": 490.0})])[0][0]
    assert spec_identity(specs[0]) == spec_identity(
        given
    )  # 0.7 of 700 W and 490 W: one configuration
    assert spec_identity(specs[0]) != spec_identity(specs[1])
    assert "limit=490W" in specs[0].name


def test_a_limit_outside_the_range_is_clipped_with_a_note(nvml):
    _, plans = plan_limits([cuda_spec(**{"gpu.power_limit_w": 900.0})])
    assert plans[0].watts == 700 and "clipped to the highest allowed" in plans[0].note
    assert plans[0].row()["power_limit_note"] == plans[0].note


def test_without_root_or_zeusd_the_plan_is_refused(nvml, tmp_path, monkeypatch):
    monkeypatch.setattr(power_limit, "PROC_STATUS", str(status_file(tmp_path, USER_CAPS)))
    monkeypatch.delenv("ZEUSD_SOCK_PATH", raising=False)
    monkeypatch.delenv("ZEUSD_HOST_PORT", raising=False)
    with pytest.raises(
        PowerLimitRefused, match="needs root \\(CAP_SYS_ADMIN\\) or a running zeusd"
    ):
        plan_limits([cuda_spec(**{"gpu.power_limit_w": 490.0})])
    assert nvml.sets == []


def test_a_cpu_run_cannot_take_a_gpu_limit():
    spec = RunSpec("x", {**cuda_spec().settings, "device": "cpu", "gpu.power_limit_w": 400.0})
    with pytest.raises(PowerLimitRefused, match="needs GPUs"):
        plan_limits([spec])


def hold(spec: RunSpec) -> tuple[RunSpec, LimitPlan]:
    specs, plans = plan_limits([spec])
    return specs[0], plans[0]


def test_the_original_is_recorded_before_the_change_and_restored_at_the_end(nvml):
    spec, plan = hold(cuda_spec(**{"gpu.power_limit_w": 490.0}))
    journal = Journal()
    with held_limit(spec, plan, journal) as held:
        (entry,) = journal.entries()
        assert entry["original_w"] == 700 and entry["applied_w"] == 490
        assert entry["pid"] == os.getpid() and nvml.gpus[0].limit_mw == 490_000
        assert [d.current_w for d in held.devices] == [700]
    assert nvml.sets == [("GPU-0", 490_000), ("GPU-0", 700_000)]
    assert journal.entries() == [] and held.problems == []


def test_a_sweep_sets_each_limit_in_turn_and_restores_the_original_between(nvml):
    specs, plans = plan_limits(
        [cuda_spec(**{"gpu.power_limit_frac": f}) for f in (1.0, 0.85, 0.7, 0.55)]
    )
    assert [p.watts for p in plans.values()] == [700, 595, 490, 385]
    for i, spec in enumerate(specs):
        with held_limit(spec, plans[i]):
            assert nvml.gpus[0].limit_mw == plans[i].watts * 1000
    assert nvml.sets == [("GPU-0", mw) for w in (700, 595, 490, 385) for mw in (w * 1000, 700_000)]
    assert Journal().entries() == []


@pytest.mark.parametrize("error", [RuntimeError("a rank failed"), KeyboardInterrupt()])
def test_the_limit_is_restored_after_an_exception_and_an_interrupt(nvml, error):
    spec, plan = hold(cuda_spec(**{"gpu.power_limit_w": 400.0}))
    with pytest.raises(type(error)), held_limit(spec, plan):
        raise error
    assert nvml.gpus[0].limit_mw == 700_000 and Journal().entries() == []


def test_a_restore_the_driver_refuses_stays_in_the_journal_for_the_next_command(nvml):
    spec, plan = hold(cuda_spec(**{"gpu.power_limit_w": 400.0}))
    with held_limit(spec, plan) as held:
        nvml.root = False  # e.g. the capability was dropped meanwhile
    assert len(held.problems) == 1 and "NoPermission" in held.problems[0]
    assert nvml.gpus[0].limit_mw == 400_000 and len(Journal().entries()) == 1
    assert restore_stale() == []  # its process (this one) still runs: not ours to restore
    nvml.root = True
    journal = Journal()
    entries = journal.entries()
    entries[0]["pid"] = dead_pid()
    journal.path.write_text(json.dumps(entries))
    (line,) = restore_stale()
    assert "restored to 700 W" in line and nvml.gpus[0].limit_mw == 700_000
    assert Journal().entries() == []


def test_a_device_another_live_run_holds_is_refused(nvml):
    spec, plan = hold(cuda_spec(**{"gpu.power_limit_w": 400.0}))
    with held_limit(spec, plan), pytest.raises(PowerLimitRefused, match="still running"):
        # a second process would see this one's entry: emulate it by taking another pid
        other = Journal()
        entries = other.entries()
        entries[0]["pid"] = 1  # init: alive, and not this process
        entries[0]["pid_start"] = power_limits._start_time(1)
        other.path.write_text(json.dumps(entries))
        with held_limit(spec, plan):
            pass


def test_a_device_left_changed_by_a_dead_run_is_refused_until_restored(nvml):
    """Recording its changed limit as the original would lose the real one."""
    spec, plan = hold(cuda_spec(**{"gpu.power_limit_w": 400.0}))
    journal = Journal()
    journal.record(power_limits.control_for(spec.config.emulate.gpu).read([0])[0], 400, "nvml", "")
    entries = journal.entries()
    entries[0]["pid"] = dead_pid()
    journal.path.write_text(json.dumps(entries))
    with pytest.raises(PowerLimitRefused, match="never restored"), held_limit(spec, plan):
        pass
    assert Journal().entries() == entries and nvml.sets == []


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_an_unrestorable_entry_says_what_to_do(nvml, tmp_path, monkeypatch):
    spec, _ = hold(cuda_spec(**{"gpu.power_limit_w": 400.0}))
    journal = Journal()
    journal.record(power_limits.control_for(spec.config.emulate.gpu).read([0])[0], 400, "nvml", "")
    entries = journal.entries()
    entries[0]["pid"] = dead_pid()
    journal.path.write_text(json.dumps(entries))
    monkeypatch.setattr(power_limit, "PROC_STATUS", str(status_file(tmp_path, USER_CAPS)))
    (line,) = restore_stale()
    assert "could not restore 700 W now" in line and "CAP_SYS_ADMIN" in line
    assert len(Journal().entries()) == 1  # kept: the only record of the original


# ----------------------------------------------------------------------------- end to end

EMULATED = [f"{k}={v}" for k, v in QUICK.items()] + ["emulate.gpu=h100", "data.seq_len=64"]


def run_args(db: Path, *extra: str) -> list[str]:
    args = ["run", "--workload", "transformer-vs-mamba", "--db", str(db)]
    for assignment in [*EMULATED, *extra]:
        args += ["--set", assignment]
    return args


def test_refused_without_permission_exit_2_nothing_run(tmp_path):
    emulated_nvml("h100").configure(grants_changes=False)  # emulates a user without root
    db = tmp_path / "r.duckdb"
    result = CliRunner().invoke(main, run_args(db, "gpu.power_limit_w=400"))
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()  # exactly one line: no blank one around it
    assert line.startswith("error: ") and "refuses changes" in line
    assert result.stdout == ""
    assert not db.exists() and emulated_nvml("h100").limits_w()[0] == 700


@pytest.mark.parametrize(
    "args",
    [
        ["--workload", "power-limit"],
        ["--workload", "transformer-vs-mamba", "--set", "gpu.power_limit_w=200"],
        ["--workload", "transformer-vs-mamba", "--set", "gpu.power_limit_frac=0.7"],
        ["--workload", "power-limit", "--device", "cpu"],
    ],
)
def test_a_limit_on_a_cpu_machine_is_refused_in_exactly_one_line(tmp_path, monkeypatch, args):
    """On a machine without CUDA (torch says so), ``device: auto`` becomes cpu."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    db = tmp_path / "r.duckdb"
    result = CliRunner().invoke(main, ["run", *args, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [result.stderr.strip()]  # one line, nothing around it
    assert result.stderr.startswith("error: ") and "needs GPUs" in result.stderr
    assert result.stdout == "" and not db.exists()


def launch(db: Path, *extra: str) -> subprocess.Popen:
    """`greenbench run` in its own process, its steps slowed so that it can be stopped mid-run."""
    return subprocess.Popen(
        [sys.executable, "-m", "greenbench", *run_args(db, *extra)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ,
        start_new_session=True,
    )  # fmt: skip


def wait_for_limit(watts: float, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    nv = emulated_nvml("h100")
    deadline = time.monotonic() + timeout_s
    while nv.limits_w()[0] != watts:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the limit was never applied"
        time.sleep(0.2)


@pytest.mark.slow
def test_sigterm_restores_the_limit(tmp_path):
    """(SIGINT takes the same path, as KeyboardInterrupt: the unit test above.)"""
    proc = launch(tmp_path / "r.duckdb", "gpu.power_limit_w=400", "debug.slowdown_s=30")
    wait_for_limit(400, proc)
    time.sleep(1.0)  # into the warm-up or the window
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert emulated_nvml("h100").limits_w()[0] == 700 and Journal().entries() == []


@pytest.mark.slow
def test_after_a_sigkill_the_next_command_restores_the_limit(tmp_path):
    proc = launch(tmp_path / "r.duckdb", "gpu.power_limit_w=400", "debug.slowdown_s=30")
    wait_for_limit(400, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its ranks: nothing runs a finally
    proc.communicate(timeout=30)
    assert emulated_nvml("h100").limits_w()[0] == 400  # left changed, and recorded
    (entry,) = Journal().entries()
    assert entry["original_w"] == 700 and entry["applied_w"] == 400
    doctor = subprocess.run(
        [sys.executable, "-m", "greenbench", "doctor"], capture_output=True, text=True,
        env=os.environ, timeout=120,
    )  # fmt: skip
    assert doctor.returncode == 0, doctor.stderr
    assert "which did not restore it; restored to 700 W" in doctor.stderr
    assert emulated_nvml("h100").limits_w()[0] == 700 and Journal().entries() == []


def test_the_doctor_reports_limits_and_permission_and_changes_nothing(nvml, tmp_path, monkeypatch):
    nvml.gpus[1].limit_mw = 450_000  # another user's cap, left as it is
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "NVIDIA H100 80GB HBM3" in out and "200–700" in out and "450" in out
    assert "greenbench may change them: this process has CAP_SYS_ADMIN (root)" in out
    monkeypatch.setattr(power_limit, "PROC_STATUS", str(status_file(tmp_path, USER_CAPS)))
    monkeypatch.delenv("ZEUSD_SOCK_PATH", raising=False)
    monkeypatch.delenv("ZEUSD_HOST_PORT", raising=False)
    out = " ".join(CliRunner().invoke(main, ["doctor"]).output.split())
    assert "greenbench may not change them" in out and "needs root" in out
    assert nvml.sets == [] and [g.limit_mw for g in nvml.gpus] == [700_000, 450_000]
