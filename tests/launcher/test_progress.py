"""The line `greenbench run` prints per finished configuration says what is stored: the medians
over its repeats (what `list runs` shows), with the run's trust markers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from greenbench.launcher import progress
from greenbench.launcher.launch import RunSummary
from greenbench.results import RepeatResult, RunOutcome
from greenbench.store import Store, list_runs


def repeat_result(repeat: int, tokens_per_s: float, jpt: float, **kw: Any) -> RepeatResult:
    """One stored repeat with these tokens/s and J/token (an estimate, as on a CPU)."""
    tokens = int(tokens_per_s * 10)
    return RepeatResult(
        repeat=repeat, tokens=tokens, seconds=tokens / tokens_per_s, tokens_per_s=tokens_per_s,
        energy_source="estimate", energy_measured=False, energy_j=jpt * tokens,
        energy_net_j=None, energy_gpu_j=None, energy_cpu_j=jpt * tokens, energy_dram_j=None,
        idle_power_w=None, joules_per_token=jpt, net_joules_per_token=None, flops=1e9,
        mfu=0.05, peak_mem_bytes=2**20, step_time_p50_s=0.5, step_time_p95_s=0.6,
        wait_fraction=0.0, wait_energy_j=None, co2_g=None, loss=10.0, **kw,
    )  # fmt: skip


def _line(repeats: list[Any], **run: Any) -> str:
    return " ".join(progress.finished_line("ok", "r1", "cfg", repeats, None, **run).split())


def test_the_run_line_prints_the_stored_medians_not_one_repeat(tmp_path: Path) -> None:
    repeats = [repeat_result(0, 79.0, 0.355), repeat_result(1, 58.0, 0.5501),
               repeat_result(2, 60.0, 0.6)]  # fmt: skip
    line = _line(repeats)
    assert "60 tok/s" in line and "0.55 J/token" in line  # medians of each figure
    assert "0.6 J/token" not in line and "79 tok/s" not in line
    assert "median of 3 repeats" in line
    # what `list runs` reads back from the store is the same figure
    db = tmp_path / "r.duckdb"
    with Store(db) as store:
        store.begin_run(_run_row("aaaaaaaaaaaa"))
        store.finish_run("aaaaaaaaaaaa", RunOutcome(status="ok", repeats=repeats))
    stored = list_runs(db).iloc[0]
    assert stored.tokens_per_s_median == 60.0
    assert stored.joules_per_token_median == pytest.approx(0.5501)


def test_two_repeats_print_their_median_and_say_it_is_no_interval() -> None:
    line = _line([repeat_result(0, 79.0, 0.355), repeat_result(1, 58.0, 0.5501)])
    assert "79 tok/s" not in line and "0.355 J/token" not in line
    assert "0.453 J/token" in line  # (0.355 + 0.5501) / 2, as DuckDB's median
    assert "min–max of 2" in line


def test_a_contended_run_and_an_unreliable_idle_baseline_are_marked() -> None:
    repeats = [repeat_result(k, 60.0, 0.5, idle_note="idle baseline unreliable: busy")
               for k in range(6)]  # fmt: skip
    line = _line(repeats, contended=True, others_busy_cores=1.2, other_greenbench=1)
    assert "⚠ contended" in line and "net unknown: idle unreliable" in line
    assert "min–max" not in line  # six repeats allow a 95 % interval
    clean = _line([repeat_result(k, 60.0, 0.5) for k in range(6)], contended=False)
    assert "contended" not in clean and "idle" not in clean


def test_run_with_progress_marks_a_contended_configuration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = SimpleNamespace(name="transformer/tiny seq=64")

    def fake_run_specs(specs: list[Any], db_path: Path, *, on_event: Any, **_: Any) -> RunSummary:
        for s in specs:
            on_event("start", s, {"run_id": "r1"})
            on_event(
                "end", s,
                {"run_id": "r1", "status": "ok", "error": None, "contended": True,
                 "others_busy_cores": 0.9, "other_greenbench": 0,
                 "repeats": [repeat_result(0, 79.0, 0.355), repeat_result(1, 58.0, 0.5501)]},
            )  # fmt: skip
        return RunSummary(run_ids=["r1"], statuses=["ok"], names=[spec.name], errors=[None])

    monkeypatch.setattr(progress, "run_specs", fake_run_specs)
    monkeypatch.setattr(progress, "install_interrupt_handlers", lambda: None)
    progress.run_with_progress([spec], tmp_path / "db.duckdb")  # type: ignore[list-item]
    err = " ".join(capsys.readouterr().err.split())
    assert "⚠ contended" in err and "0.453 J/token" in err and "79 tok/s" not in err


def _run_row(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id, "workload": "transformer-vs-mamba", "config_name": "cfg",
        "config": {"settings": {}}, "model_family": "transformer", "model_size": "tiny",
        "strategy": "single", "layout": "dp1", "device": "cpu", "device_type": "cpu:test",
        "nproc": 1, "nnodes": 1, "precision": "fp32", "seq_len": 64, "lengths": "fixed",
    }  # fmt: skip


def test_each_seed_s_run_is_named_with_its_seed_where_several_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    specs = [SimpleNamespace(name="transformer/tiny", settings={"seed": k}) for k in (0, 1)]

    def fake_run_specs(specs: list[Any], db_path: Path, *, on_event: Any, **_: Any) -> RunSummary:
        for s in specs:
            on_event("start", s, {"run_id": "r1"})
            on_event("end", s, {"run_id": "r1", "status": "ok", "error": None, "repeats": []})
        return RunSummary(run_ids=["r1"] * 2, statuses=["ok"] * 2, names=["x"] * 2,
                          errors=[None] * 2)  # fmt: skip

    monkeypatch.setattr(progress, "run_specs", fake_run_specs)
    monkeypatch.setattr(progress, "install_interrupt_handlers", lambda: None)
    progress.run_with_progress(specs, tmp_path / "db.duckdb")  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert "transformer/tiny seed=0" in err and "transformer/tiny seed=1" in err
    one = progress.run_names(specs[:1])  # type: ignore[arg-type]
    assert one(specs[0]) == "transformer/tiny"  # one seed: the name alone, as before


def test_a_run_to_a_target_says_how_many_repeats_reached_it_and_the_medians_to_it() -> None:
    def reached(k: int, hit: bool, seconds: float, joules: float | None) -> RepeatResult:
        return repeat_result(
            k, 60.0, 0.5, target_loss=3.25, target_reached=hit,
            seconds_to_target=seconds if hit else None,
            energy_to_target_j=joules if hit else None, best_val_loss=3.0,
        )  # fmt: skip

    line = _line([reached(0, True, 10.0, 500.0), reached(1, False, 0, None),
                  reached(2, True, 12.0, 700.0)])  # fmt: skip
    assert "target 3.25: reached 2/3, 12 s, 700 J (estimate) to it (median)" in line
    missed = _line([reached(0, True, 10.0, 500.0), reached(1, False, 0, None)])
    assert "reached 1/2 (too few for a median)" in missed
    assert "target" not in _line([repeat_result(0, 60.0, 0.5)])  # a window run
    never = _line([reached(0, False, 0, None), reached(1, False, 0, None)])
    assert "reached 0/2, not reached (best 3)" in never
