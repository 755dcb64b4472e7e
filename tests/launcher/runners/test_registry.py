"""The runners' registry: each configuration's runner is chosen once, by the first registered
runner that takes it; a session makes each runner once; a runner added ahead of another takes
its configurations from it; and the run record a runner returns is the row the store gets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from greenbench.launcher import runners
from greenbench.launcher.power_limits import LimitPlan
from greenbench.launcher.resolve import resolve_spec
from greenbench.launcher.runners import Peak, RunContext, Runners, runner_for
from greenbench.launcher.runners.record import build_record, spec_record
from greenbench.launcher.runners.simulated import SimulatedRunner
from greenbench.launcher.runners.torchrun import TorchrunRunner
from greenbench.settings.runspec import RunSpec
from greenbench.spec import expand


def simulated_spec() -> RunSpec:
    settings = {"skippipe.mode": "simulate", "skippipe.schedule": "skippipe",
                "emulate.slow_nodes": "", "repeats": 1}  # fmt: skip
    [one] = expand("skippipe", [settings])
    return resolve_spec(one)


def measured_spec(**over: Any) -> RunSpec:
    return resolve_spec(expand("transformer-vs-mamba", [{"device": "cpu", **over}])[0])


def test_each_configuration_gets_the_first_runner_that_takes_it() -> None:
    assert isinstance(runner_for(simulated_spec()), SimulatedRunner)
    assert isinstance(runner_for(measured_spec()), TorchrunRunner)
    assert runners.RUNNERS[-1].takes(simulated_spec())  # the last takes any configuration


def test_a_session_makes_each_runner_once() -> None:
    session = Runners()
    first, again = session.for_spec(measured_spec()), session.for_spec(measured_spec(seed=1))
    assert first is again
    assert session.for_spec(simulated_spec()) is not first


def test_a_runner_registered_ahead_takes_its_configurations(monkeypatch: pytest.MonkeyPatch):
    class OnePerSeed(TorchrunRunner):
        name = "one-per-seed"

        @classmethod
        def takes(cls, spec: RunSpec) -> bool:
            return spec["seed"] == 7

    monkeypatch.setattr(runners, "RUNNERS", (OnePerSeed, *runners.RUNNERS))
    assert isinstance(runner_for(measured_spec(seed=7)), OnePerSeed)
    assert type(runner_for(measured_spec(seed=1))) is TorchrunRunner


def test_what_each_runner_says_of_what_a_configuration_occupies() -> None:
    sim, spec = simulated_spec(), measured_spec(strategy="ddp", nproc=2)
    assert runner_for(sim).shape(sim) == runners.Shape(1, 1, launches_ranks=False)
    assert runner_for(spec).shape(spec) == runners.Shape(1, 2, launches_ranks=True)
    assert runner_for(sim).why_not_here(sim, Peak(None, None, "x"), devices=0) is None


def test_the_record_is_the_row_the_store_gets() -> None:
    spec = measured_spec()
    ctx = RunContext(
        "aaaaaaaaaaaa", {"git_sha": "abc", "host": "h"}, (475.0, "world"),
        Peak(1e12, "test", "cpu:Test CPU"),
        limit=LimitPlan((0,), 200.0, 300.0, "emulated", "", "clipped"),
    )  # fmt: skip
    row = TorchrunRunner().record(spec, ctx).row()
    assert row["status"] == "running" and row["run_id"] == "aaaaaaaaaaaa"
    assert row["layout"] == spec.layout.text and row["dp_replicate"] == spec.layout.dp_replicate
    assert json.loads(row["kernels"])["optimizer"]  # torchrun ranks step an optimizer
    assert (row["device_type"], row["git_sha"], row["carbon_intensity_g_per_kwh"]) == (
        "cpu:Test CPU", "abc", 475.0,
    )  # fmt: skip
    assert (row["power_limit_w"], row["power_limit_note"]) == (200.0, "clipped")
    assert set(spec_record(spec, "aaaaaaaaaaaa").row()) == set(row)  # one set of columns


def test_a_simulated_record_is_marked_and_steps_no_optimizer() -> None:
    sim = simulated_spec()
    ctx = RunContext("bbbbbbbbbbbb", {}, (475.0, "world"), SimulatedRunner().peak(sim))
    record = SimulatedRunner().record(sim, ctx)
    assert record.simulated and record.device_type == "simulated:local"
    assert "optimizer" not in (record.kernels or {})
    assert build_record(sim, ctx, device_type="x", kernels={}).simulated is False
