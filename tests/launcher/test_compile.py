"""``train.compile``: what ``auto`` becomes where, that eager runs keep their identity, and that a
compiled run trains the same function as an eager one."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from helpers import QUICK

from greenbench.cli import main
from greenbench.launcher.resolve import resolve_spec
from greenbench.settings import identity_of, spec_identity, spec_key
from greenbench.spec import expand
from greenbench.store import read_frame
from greenbench.vocabulary import config_key


def spec_of(**settings):
    (spec,) = expand("transformer-vs-mamba", [{**QUICK, **settings}])
    return spec


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"device": "cuda"}, "on"),
        ({"device": "cuda", "model.family": "mamba", "model.scan": "torch"}, "off"),
        ({"device": "cpu"}, "off"),  # CPU reference runs stay eager
        ({"device": "cpu", "train.compile": "on"}, "on"),
        ({"device": "cuda", "train.compile": "off"}, "off"),
    ],
)
def test_auto_compiles_the_transformer_on_cuda_only(monkeypatch, settings, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # CUDA faked at its boundary
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_spec(spec_of(**settings))["train.compile"] == expected


def test_an_eager_run_keeps_the_identity_it_had_before_the_setting():
    eager = resolve_spec(spec_of(device="cpu"))
    assert "train.compile" not in spec_identity(eager)
    before = {k: v for k, v in eager.settings.items() if k != "train.compile"}
    assert spec_key(eager) == config_key(identity_of(before, eager.workload))
    compiled = resolve_spec(spec_of(device="cpu", **{"train.compile": "on"}))
    assert spec_identity(compiled)["train.compile"] == "on"
    assert spec_key(compiled) != spec_key(eager)


@pytest.mark.slow
def test_a_compiled_run_trains_the_same_function_as_an_eager_one(tmp_path):
    db = tmp_path / "r.duckdb"
    quick = [f"{k}={v}" for k, v in QUICK.items() if k != "repeats"]
    for mode in ("off", "on"):
        args = ["run", "--workload", "transformer-vs-mamba", "--device", "cpu", "--db", str(db)]
        for assignment in [*quick, "train.warmup_steps=1", f"train.compile={mode}"]:
            args += ["--set", assignment]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
    runs = read_frame(db, "SELECT r.config, p.loss FROM runs r JOIN results p USING (run_id)")
    by_mode = {json.loads(c)["settings"]["train.compile"]: loss for c, loss in runs.values}
    assert by_mode["on"] == pytest.approx(by_mode["off"], rel=1e-4)
