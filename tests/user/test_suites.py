"""User workloads in suite files: by entry point or registered name, with ``user.*`` settings in
an entry's ``set``; a suite's shared defaults give each workload the settings it has; its
``python_path`` (relative to the suite file) makes a checkout importable."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from greenbench.errors import SpecError
from greenbench.spec import expand_suite
from greenbench.suite import load_suite

BENCH = """
    import torch
    from greenbench import Batch, Workload

    workload = Workload(
        name="s", build_model=lambda ctx: torch.nn.Linear(2, 2),
        batch=lambda ctx, step: Batch(torch.zeros(1, 2), 1), loss=lambda m, x: m(x).sum(),
        settings={"width": 4},
    )
"""
SUITE = """
    python_path = ["code"]

    [defaults]
    repeats = 2
    "user.width" = 8            # the user workload's
    "data.seq_len" = 64         # greenbench's own workload's

    [[entries]]
    workload = "gbs_bench:workload"
    set = {{ "user.width" = [16, 32] }}

    [[entries]]
    workload = "transformer-vs-mamba"
    set = {{ "model.family" = "transformer" }}
    {extra}
"""


def suite(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "gbs_bench.py").write_text(textwrap.dedent(BENCH))
    path = tmp_path / "suite.toml"
    path.write_text(textwrap.dedent(SUITE.format(extra=extra)))
    return path


def test_shared_defaults_go_to_the_workloads_that_have_them(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    specs = expand_suite(load_suite(str(suite(tmp_path))), {}, label=None, machine_device="cpu")
    user = [s for s in specs if s.workload == "gbs_bench:workload"]
    own = [s for s in specs if s.workload == "transformer-vs-mamba"]
    assert [s["user.width"] for s in user] == [16, 32] and all(s["repeats"] == 2 for s in user)
    assert all("data.seq_len" not in s.settings for s in user)
    assert own and all(s["data.seq_len"] == 64 and "user.width" not in s.settings for s in own)
    assert str(tmp_path / "code") in sys.path
    assert str(tmp_path / "code") in os.environ["PYTHONPATH"]  # for the workers


def test_a_setting_no_workload_of_the_suite_has_is_refused(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    spec = load_suite(str(suite(tmp_path)))
    with pytest.raises(SpecError, match=r"unknown setting 'user\.depth'"):
        expand_suite(spec, {"user.depth": 3}, label=None, machine_device="cpu")
    extra = '[[entries]]\nworkload = "transformer-vs-mamba"\nset = { "user.width" = 4 }\n'
    bad = load_suite(str(suite(tmp_path, extra)))
    with pytest.raises(SpecError, match=r"transformer-vs-mamba: unknown setting 'user\.width'"):
        expand_suite(bad, {}, label=None, machine_device="cpu")
