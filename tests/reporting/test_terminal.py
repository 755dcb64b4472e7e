"""greenbench.reporting.terminal (list, show, doctor) and the rich output of `greenbench run`.

Why: these views are what a user reads during and after a failure, so they must survive the rows
a failure leaves (NULL energy columns of running, failed and interrupted runs) and print stored
text (labels, errors, settings) as written, never as rich markup. Databases here are written
through the real ``Store``, as the launcher writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.results import RepeatResult, RunOutcome
from greenbench.store import Store

LABEL = "[/bold] x"
ERROR = "failed: [red]x[/red] and [1, 2]"


def _row(run_id: str, **kw: Any) -> dict[str, Any]:
    """A ``runs`` row as the launcher begins it (no energy columns until the run ends)."""
    settings = {"model.size": "tiny", "data.lengths": kw.pop("lengths", "fixed")}
    return {
        "run_id": run_id,
        "suite": "smoke",
        "workload": kw.pop("workload", "transformer-vs-mamba"),
        "config_name": kw.pop("config_name", "transformer/tiny seq=128 single×1"),
        "config": {"workload": "w", "label": kw.get("label"), "settings": settings},
        "model_family": "transformer",
        "model_size": "tiny",
        "strategy": "single",
        "layout": "dp1",
        "device": "cpu",
        "device_type": "cpu:test",
        "nproc": 1,
        "nnodes": 1,
        "precision": "fp32",
        "seq_len": 128,
        "lengths": "fixed",
        "git_sha": "abc123",
        "host": "bench-01",
        **kw,
    }


def _repeat(repeat: int, jpt: float = 0.02) -> RepeatResult:
    return RepeatResult(
        repeat=repeat, tokens=4096, seconds=2.0, tokens_per_s=2048.0,
        energy_source="estimate", energy_measured=False, energy_j=jpt * 4096,
        energy_net_j=None, energy_gpu_j=None, energy_cpu_j=jpt * 4096, energy_dram_j=None,
        idle_power_w=None, joules_per_token=jpt, net_joules_per_token=None, flops=1e12,
        mfu=0.1, peak_mem_bytes=300 * 2**20, step_time_p50_s=0.5, step_time_p95_s=0.6,
        wait_fraction=0.0, wait_energy_j=None, co2_g=None, loss=10.0,
        energy_note="TDP × utilisation model [CodeCarbon]",
    )  # fmt: skip


def _ok(store: Store, run_id: str, **kw: Any) -> None:
    store.begin_run(_row(run_id, **kw))
    outcome = RunOutcome(
        status="ok",
        repeats=[_repeat(k) for k in range(3)],
        peak_flops=1e11,
        peak_flops_source="cpu-gemm-calibration",
        warnings=["[yellow]slow[/yellow] window [0.4 s]"],
    )
    store.finish_run(run_id, outcome)


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def mixed_db(tmp_path: Path) -> Path:
    """One run in each state: ok (with results), failed, interrupted, and still running."""
    path = tmp_path / "mixed.duckdb"
    with Store(path) as store:
        _ok(store, "run0ok000001")
        store.begin_run(_row("run1failed01"))
        store.finish_run("run1failed01", RunOutcome(status="failed", error="boom", failed_rank=1))
        store.begin_run(_row("run2interr01"))
        store.mark_run("run2interr01", "interrupted", "interrupted by the user")
    Store(path).begin_run(_row("run3running1"))  # no context: as a killed launcher leaves it
    return path


@pytest.fixture
def bracket_db(tmp_path: Path) -> Path:
    """Stored text that looks like rich markup: a label, an error, a tail, settings, names."""
    path = tmp_path / "brackets.duckdb"
    with Store(path) as store:
        _ok(
            store,
            "okbracket001",
            label=LABEL,
            lengths="[b]long[/b]",
            workload="mypkg.bench:[/italic] w",
            config_name="transformer/tiny [/bold] seq=128",
        )
        store.begin_run(_row("failbracket1", label=LABEL))
        outcome = RunOutcome(
            status="failed",
            error=ERROR,
            failed_rank=1,
            error_tail="Traceback (most recent call last):\n[bold]RuntimeError[/bold]: [1, 2]",
            log_path="/tmp/logs/[run]",
        )
        store.finish_run("failbracket1", outcome)
    return path


# --- item: list runs during and after failures ---------------------------------------------


def test_list_runs_shows_ok_failed_interrupted_and_running_runs(mixed_db: Path) -> None:
    result = _invoke("list", "runs", "--db", str(mixed_db))
    assert result.exit_code == 0, result.output
    lines = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert set(lines) == {"run0ok000001", "run1failed01", "run2interr01", "run3running1"}
    for run_id, status in [
        ("run0ok000001", "ok"),
        ("run1failed01", "failed"),
        ("run2interr01", "interrupted"),
        ("run3running1", "running"),
    ]:
        assert f" {status} " in lines[run_id]
    # the ok run's estimate keeps its "≈" mark even beside rows whose energy_measured is NULL
    assert "≈ 0.02" in lines["run0ok000001"] and "2,048" in lines["run0ok000001"]
    assert "≈" not in lines["run3running1"] and "—" in lines["run3running1"]


def test_show_a_running_and_an_interrupted_run(mixed_db: Path) -> None:
    for run_id in ("run3running1", "run2interr01", "run1failed01"):
        result = _invoke("show", run_id, "--db", str(mixed_db))
        assert result.exit_code == 0, result.output
        assert run_id in result.output


# --- item: stored text is printed as written, never as rich markup ---------------------------


def test_show_prints_brackets_literally(bracket_db: Path) -> None:
    failed = _invoke("show", "failbracket1", "--db", str(bracket_db))
    assert failed.exit_code == 0, failed.output
    assert ERROR in failed.output
    assert f"label={LABEL}" in failed.output
    assert "[bold]RuntimeError[/bold]: [1, 2]" in failed.output
    assert "/tmp/logs/[run]" in failed.output

    ok = _invoke("show", "okbracket001", "--db", str(bracket_db))
    assert ok.exit_code == 0, ok.output
    assert "transformer/tiny [/bold] seq=128" in ok.output
    assert "mypkg.bench:[/italic] w" in ok.output
    assert "data.lengths=[b]long[/b]" in ok.output
    assert "[yellow]slow[/yellow] window [0.4 s]" in ok.output
    assert "[CodeCarbon]" in ok.output


def test_list_runs_prints_brackets_literally(bracket_db: Path) -> None:
    result = _invoke("list", "runs", "--db", str(bracket_db))
    assert result.exit_code == 0, result.output
    assert "transformer/tiny [/bold] seq=128" in result.output
    assert "mypkg.bench:[/italic] w" in result.output


def test_doctor_prints_probe_reasons_literally(monkeypatch: pytest.MonkeyPatch) -> None:
    from greenbench.energy import select
    from greenbench.energy.base import Probe

    probe = Probe(source="rapl", available=False, reason="open failed: [Errno 13] [/bold]")
    monkeypatch.setattr(select, "cuda_device_names", lambda: ["GPU [/i] 0"])
    monkeypatch.setattr(select, "describe_cuda", lambda names: ", ".join(names))
    monkeypatch.setattr(select, "doctor_report", lambda: [probe])
    monkeypatch.setattr(select, "explain_choices", lambda probes, names: {"cpu": "[red]why[/red]"})
    result = _invoke("doctor")
    assert result.exit_code == 0, result.output
    for text in ("GPU [/i] 0", "[Errno 13] [/bold]", "[red]why[/red]"):
        assert text in result.output


def test_run_progress_and_failures_table_print_errors_literally(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`greenbench run`'s live lines and closing failures table, with the launcher faked at
    its boundary (``run_specs`` and its events)."""
    from types import SimpleNamespace

    from greenbench.launcher import progress
    from greenbench.launcher.launch import RunSummary

    spec = SimpleNamespace(name=f"transformer/tiny {LABEL}")

    def fake_run_specs(specs: list[Any], db_path: Path, *, on_event: Any, **_: Any) -> RunSummary:
        for s in specs:
            on_event("start", s, {"run_id": "r1"})
            on_event("end", s, {"run_id": "r1", "status": "failed", "error": ERROR})
        return RunSummary(run_ids=["r1"], statuses=["failed"], names=[spec.name], errors=[ERROR])

    monkeypatch.setattr(progress, "run_specs", fake_run_specs)
    monkeypatch.setattr(progress, "install_interrupt_handlers", lambda: None)
    summary = progress.run_with_progress([spec], tmp_path / "db[1].duckdb")  # type: ignore[list-item]
    assert summary.failed == 1
    err = " ".join(capsys.readouterr().err.split())
    assert err.count(ERROR) == 2  # the live line and the failures table
    assert err.count(spec.name) == 2
    assert "db[1].duckdb" in "".join(err.split())  # a long path may wrap anywhere


def test_a_repeat_s_gpu_power_and_node_meter_are_shown_beside_it() -> None:
    from greenbench.reporting.terminal import beside_line

    line = beside_line(
        {"gpu_power_avg_w": 489.6, "gpu_power_peak_w": 497.0, "energy_node_j": None,
         "energy_node_source": "redfish", "energy_node_note": "unavailable: [red]x[/red]",
         "energy_host_source": "rapl"}
    )  # fmt: skip
    assert "GPU power mean 490 W, peak 497 W" in line
    assert "node meter (redfish) unavailable" in line and "\\[red]x" in line  # escaped
    assert "CPU/DRAM from rapl" in line
    assert beside_line({"gpu_power_avg_w": None, "energy_node_source": None}) == ""


# --- the trust model in list and show ----------------------------------------------------------


@pytest.fixture
def trust_db(tmp_path: Path) -> Path:
    """A clean run, a run stored contended (with how busy, in counts), and a run whose idle
    baseline was unreliable (net energy unknown, with why)."""
    from dataclasses import replace

    path = tmp_path / "trust.duckdb"
    why = "idle baseline unreliable: idle power sampled while other processes kept 1.10 cores busy"
    with Store(path) as store:
        _ok(store, "cleanrun0001")
        store.begin_run(_row("busyrun00001"))
        store.finish_run(
            "busyrun00001",
            RunOutcome(status="ok", repeats=[_repeat(k) for k in range(3)], contended=True,
                       others_busy_cores=1.3, other_greenbench=2,
                       warnings=["contended: 2 other greenbench processes ran meanwhile "
                                 "(1 run, 1 rank) (figures may be skewed)"]),
        )  # fmt: skip
        store.begin_run(_row("idlerun00001"))
        repeats = [replace(_repeat(k), idle_power_w=30.0, idle_note=why) for k in range(6)]
        store.finish_run("idlerun00001", RunOutcome(status="ok", repeats=repeats))
    return path


def test_list_runs_marks_contended_runs_and_unknown_net_energy(trust_db: Path) -> None:
    result = _invoke("list", "runs", "--db", str(trust_db))
    assert result.exit_code == 0, result.output
    assert "trust" in result.output
    lines = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert "⚠ contended" in lines["busyrun00001"]
    assert "contended" not in lines["cleanrun0001"]
    assert "net unknown" in lines["idlerun00001"] and "contended" not in lines["idlerun00001"]


def test_show_says_how_far_to_trust_a_run(trust_db: Path) -> None:
    busy = " ".join(_invoke("show", "busyrun00001", "--db", str(trust_db)).output.split())
    assert "trust: ⚠ contended" in busy
    assert "other processes kept 1.30 cores busy; 2 other greenbench processes" in busy
    assert "min–max range of 3 repeats, not a CI" in busy
    idle = " ".join(_invoke("show", "idlerun00001", "--db", str(trust_db)).output.split())
    assert "net energy unknown: idle baseline unreliable: idle power sampled while" in idle
    # a run stored without a contention watch is unknown, never shown as clean
    unwatched = " ".join(_invoke("show", "cleanrun0001", "--db", str(trust_db)).output.split())
    assert "contention not recorded" in unwatched and "⚠ contended" not in unwatched


def test_a_rank_whose_node_is_read_by_local_rank_0_shows_no_energy_not_a_zero() -> None:
    from greenbench.reporting.terminal import read_elsewhere

    assert read_elsewhere({"local_rank": 1, "energy_j": 0.0})  # its node's CPU: rank 0's window
    assert not read_elsewhere({"local_rank": 0, "energy_j": 0.0})
    assert not read_elsewhere({"local_rank": 1, "energy_j": 350.0})  # its own GPU


# --- item: show prints what differs from the defaults -----------------------------------------


def test_show_prints_changed_settings_and_every_setting_with_all(tmp_path: Path) -> None:
    """model.size=tiny and data.lengths=fixed are the defaults; data.lengths=sft is not; a
    user workload's own setting has no default greenbench knows, so it is always shown."""
    path = tmp_path / "show.duckdb"
    with Store(path) as store:
        _ok(store, "showchanged1", lengths="sft")
        store.begin_run({**_row("showdefault1"), "config": {"settings": {"model.size": "tiny"}}})
    changed = _invoke("show", "showchanged1", "--db", str(path))
    assert changed.exit_code == 0, changed.output
    line = next(x for x in changed.output.splitlines() if x.startswith("settings"))
    assert "data.lengths=sft" in line and "model.size" not in line
    assert "(2 in all: --all)" in line
    every = _invoke("show", "showchanged1", "--all", "--db", str(path))
    line = next(x for x in every.output.splitlines() if x.startswith("settings"))
    assert "data.lengths=sft" in line and "model.size=tiny" in line
    default = _invoke("show", "showdefault1", "--db", str(path))
    assert "settings changed from the defaults: none (1 in all: --all)" in default.output
