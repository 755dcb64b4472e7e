"""benchmarks/gpu_speed.py: without CUDA it refuses in one line; its pieces (batches, suite file,
kernel refusals, verdicts) on their own; and ``--quick`` runs every part's plumbing on the CPU
through greenbench's own command line, saying on every judged line that these are not the GPU
figures."""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from greenbench import spec
from greenbench.store import read_frame
from greenbench.suite import load_suite

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_speed.py"


@functools.cache
def benchmark() -> ModuleType:
    module_spec = importlib.util.spec_from_file_location("gpu_speed_benchmark", SCRIPT)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # its dataclasses look their module up there
    module_spec.loader.exec_module(module)
    return module


def test_without_cuda_it_says_so_in_one_line_and_exits_2(monkeypatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert benchmark().main([]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.strip().splitlines()
    assert "needs a CUDA GPU" in line and "--quick" in line


def test_batches_keep_the_tokens_per_step() -> None:
    plan = benchmark().make_plan(quick=False, repeats=None, seq_lens=None)
    assert plan.seq_lens == (1024, 4096, 8192, 16384) and plan.device == "cuda"
    assert [plan.batch(s) for s in plan.seq_lens] == [(16, 8), (4, 2), (2, 1), (1, 1)]
    assert plan.precision == "bf16" and plan.size == "125m" and plan.big == "1b"
    quick = benchmark().make_plan(quick=True, repeats=None, seq_lens=None)
    assert quick.device == "cpu" and quick.size == quick.big == "tiny"
    assert quick.precision == "fp32"


def test_the_suite_file_is_one_greenbench_loads(tmp_path: Path) -> None:
    gs = benchmark()
    plan = gs.make_plan(quick=True, repeats=None, seq_lens=None)
    configs = [
        gs.Config("transformer", "tiny", 64, 4, 4),
        gs.Config("mamba", "tiny", 128, 2, 2, kernel="torch"),
    ]
    suite = load_suite(str(gs.write_suite(tmp_path / "s.toml", plan, configs)))
    specs = spec.expand_suite(suite, {"device": "cpu", "repeats": 1}, label=gs.LABEL)
    got = [(s["model.family"], s["data.seq_len"], s["model.scan"]) for s in specs]
    assert got == [("transformer", 64, "auto"), ("mamba", 128, "torch")]
    assert all(s["train.min_window_s"] == 0.0 and s["energy.idle_s"] == 0.0 for s in specs)


def test_kernels_the_family_refuses_are_named_with_its_reason() -> None:
    choices = dict(benchmark().kernels_to_run("mamba", "cpu", ("mamba-ssm", "auto", "nope")))
    assert choices["auto"] == ""
    assert choices["mamba-ssm"].startswith("refused: ") and "CUDA" in choices["mamba-ssm"]
    assert choices["nope"].startswith("refused: ")


def test_an_absent_family_is_named_and_skipped(monkeypatch, capsys, tmp_path: Path) -> None:
    gs = benchmark()
    from greenbench import models

    monkeypatch.setattr(models, "FAMILIES", {"transformer": models.FAMILIES["transformer"]})
    monkeypatch.setattr(gs, "run_configs", lambda *a: None)  # nothing runs: nothing stored
    gs.part_a(gs.make_plan(quick=True, repeats=None, seq_lens=None), tmp_path / "r.db", tmp_path)
    out = capsys.readouterr().out
    assert "mamba: not in greenbench.models.FAMILIES here, skipped" in out
    assert "mamba2: not in greenbench.models.FAMILIES here, skipped" in out
    assert re.search(r"transformer/tiny seq=64\s+not run", out)


def test_what_this_run_stored_ok_is_not_handed_to_the_command_again(monkeypatch, tmp_path):
    gs = benchmark()
    plan = gs.make_plan(quick=True, repeats=None, seq_lens=None)
    old, new = gs.Config("transformer", "tiny", 64, 4, 4), gs.Config("mamba", "tiny", 64, 4, 4)
    suites: list[str] = []  # the suite file of each command started

    def command(cmd: list[str], **_: object) -> subprocess.CompletedProcess:
        suites.append(Path(cmd[cmd.index("--suite") + 1]).read_text())
        return subprocess.CompletedProcess(cmd, 0, "", "")

    stored: set = set()
    monkeypatch.setattr(gs.subprocess, "run", command)
    monkeypatch.setattr(
        gs, "lookup", lambda db, c: gs.Measured("ok", tokens_per_s=1.0) if c in stored else
        gs.Measured("failed")
    )  # fmt: skip
    db = tmp_path / "r.duckdb"
    gs.run_configs(db, plan, [old], tmp_path)
    stored.add(old)
    gs.run_configs(db, plan, [old, new], tmp_path)  # new failed: handed again below
    gs.run_configs(db, plan, [old, new], tmp_path)
    assert len(suites) == 3
    assert ['"transformer"' in t for t in suites] == [True, False, False]
    assert all('"mamba"' in t for t in suites[1:])
    stored.add(new)
    gs.run_configs(db, plan, [old, new], tmp_path)  # both stored ok by this run: no command
    assert len(suites) == 3
    gs.run_configs(tmp_path / "other.duckdb", plan, [old], tmp_path)  # another database
    assert len(suites) == 4


def test_verdicts() -> None:
    gs = benchmark()
    assert gs.verdict(True, quick=False) == "MET" and gs.verdict(False, quick=False) == "SHORT"
    assert gs.verdict(True, quick=True) == f"MET ({gs.QUICK_NOTE})"
    assert gs.mfu_verdict(0.46, 0.45, 0.40, quick=False) == "MET"
    assert gs.mfu_verdict(0.42, 0.45, 0.40, quick=False) == "SHORT of 45%, above the 40% floor"
    assert gs.mfu_verdict(0.315, 0.45, 0.40, quick=False) == "SHORT of 45%, below the 40% floor"
    assert gs.mfu_verdict(0.10, 0.204, None, quick=False) == "SHORT"


@pytest.mark.slow
def test_quick_runs_every_part_on_the_cpu(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "gs.duckdb"
    assert benchmark().main(["--quick", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("QUICK CPU PLUMBING CHECK") and "NOT the GPU figures" in out
    for header in ("(a) state-space", "(b) greenbench Transformer", "(c) MFU", "(d) measurement"):
        assert header in out
    lines = out.splitlines()[1:]  # below the banner
    judged = [line for line in lines if re.search(r"\b(MET|SHORT)\b", line)]
    assert len(judged) >= 5  # (a) at both lengths, (b), (c) twice, (d)
    assert all(benchmark().QUICK_NOTE in line for line in judged)
    assert re.search(r"mamba/tiny seq=64 scan=auto \[\w+\]\s+[\d,]+\s+[\d,]+\s+[\d.]+", out)
    assert re.search(r"transformer/tiny seq=128\s+MFU\s+[\d.]+%", out)
    assert re.search(r"meter \w+: one reading [\d.,]+ µs", out)
    assert re.search(r"overhead [\d.]+% of a step\s+goal ≤ 0.1 %", out)
    runs = read_frame(db, "SELECT model_family, status, label, device FROM runs")
    assert len(runs) >= 4 and set(runs["status"]) == {"ok"}
    assert set(runs["label"]) == {"gpu-speed"} and set(runs["device"]) == {"cpu"}
