"""The idle baseline (`greenbench.launcher.idle`): reused by later configurations and later runs
of this machine only while it is fresh (younger than ``energy.idle_max_age_s``) and was taken
on a quiet machine; the clock, the contention watch and the meter are faked at their
boundaries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import greenbench.energy
from greenbench.launcher import idle
from greenbench.launcher.idle import IdleCache, IdlePower, baseline, baseline_key
from greenbench.settings.runspec import RunSpec
from greenbench.spec import expand


class Clock:
    """Wall-clock seconds that move only when a test says so."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Meter:
    """A meter whose idle sample takes ``sample_s`` seconds of the fake clock and reads
    ``watts``; counts its samples."""

    source = "estimate"

    def __init__(self, clock: Clock, watts: float = 12.5, sample_s: float = 1.0) -> None:
        self.clock, self.watts, self.sample_s = clock, watts, sample_s
        self.samples = 0

    def idle_power_w(self, seconds: float) -> float:
        self.samples += 1
        self.clock.now += self.sample_s
        return self.watts

    def close(self) -> None:
        pass


class Watch:
    """`ContentionWatch` as the machine decides it: contended or quiet."""

    busy = False

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.contended = Watch.busy
        self.others_busy_cores = 1.4 if Watch.busy else 0.05
        self.seen = "other processes kept 1.40 of 2 cores busy meanwhile" if Watch.busy else ""
        return False


@pytest.fixture
def clock() -> Clock:
    Watch.busy = False
    return Clock()


def take(meter: Meter, cache: IdleCache, clock: Clock, max_age_s: float = 600.0, key="k"):
    return baseline(meter, key, 1.0, max_age_s, cache, clock=clock, watch=Watch)


def test_a_quiet_baseline_is_reused_while_younger_than_its_max_age(tmp_path: Path, clock: Clock):
    meter, cache = Meter(clock), IdleCache(tmp_path / "idle.json", clock=clock)
    first = take(meter, cache, clock)
    assert (first.watts, first.why, first.seconds, first.age_s) == (12.5, "", 1.0, None)
    assert not first.reused and meter.samples == 1
    clock.now += 598.0  # counted from the start of its 1 s sample: 599 s old now
    later = IdleCache(tmp_path / "idle.json", clock=clock)  # a later run: from the file
    again = take(meter, later, clock)
    assert again.reused and again.watts == 12.5 and again.seconds == 0.0
    assert again.age_s == pytest.approx(599.0)
    assert meter.samples == 1


def test_at_its_max_age_a_baseline_is_stale_and_sampled_again(tmp_path: Path, clock: Clock):
    meter, cache = Meter(clock, sample_s=0.0), IdleCache(tmp_path / "idle.json", clock=clock)
    take(meter, cache, clock)
    clock.now += 600.0 - 1e-6
    assert take(meter, cache, clock).reused  # just younger than 600 s
    clock.now += 1e-6  # exactly 600 s old: stale
    fresh = take(meter, cache, clock)
    assert not fresh.reused and fresh.age_s is None and meter.samples == 2
    clock.now += 1.0
    assert take(meter, cache, clock).age_s == pytest.approx(1.0)  # the new one is reused


def test_a_baseline_taken_on_a_busy_machine_serves_its_run_only(tmp_path: Path, clock: Clock):
    meter, cache = Meter(clock), IdleCache(tmp_path / "idle.json", clock=clock)
    Watch.busy = True
    busy = take(meter, cache, clock)
    assert busy.watts == 12.5 and busy.why.startswith("idle power sampled while other")
    assert not busy.reused and not (tmp_path / "idle.json").exists()
    clock.now += 1.0
    Watch.busy = False
    quiet = take(meter, cache, clock)  # sampled again, now quiet
    assert quiet.why == "" and not quiet.reused and meter.samples == 2
    clock.now += 1.0
    assert take(meter, cache, clock).reused  # the quiet one is reused


def test_no_reuse_at_max_age_zero_nor_across_keys_nor_after_a_clock_step_back(
    tmp_path: Path, clock: Clock
):
    meter, cache = Meter(clock), IdleCache(tmp_path / "idle.json", clock=clock)
    take(meter, cache, clock)
    assert not take(meter, cache, clock, max_age_s=0.0).reused  # 0: every configuration
    assert not take(meter, cache, clock, key="another source or machine").reused
    clock.now -= 3600.0  # the clock stepped back: the entry's age says nothing
    assert not take(meter, cache, clock, key="another source or machine").reused
    assert meter.samples == 4


def test_the_key_holds_the_machine_device_source_devices_and_window(
    monkeypatch: pytest.MonkeyPatch,
):
    key = baseline_key("cuda", "nvml", [0, 1], 1.0)
    assert {baseline_key("cpu", "nvml", [0, 1], 1.0), baseline_key("cuda", "zeus", [0, 1], 1.0),
            baseline_key("cuda", "nvml", [0], 1.0), baseline_key("cuda", "nvml", [0, 1], 2.0),
            } & {key} == set()  # fmt: skip
    monkeypatch.setattr(idle, "machine_key", lambda: "a new kernel")
    assert baseline_key("cuda", "nvml", [0, 1], 1.0) != key


def spec(**settings: Any) -> RunSpec:
    return expand("transformer-vs-mamba", [{"device": "cpu", "nproc": 1, **settings}])[0]


def test_a_session_reuses_its_quiet_baseline_and_forgets_one_a_run_proved_stale(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    meter = Meter(clock)
    monkeypatch.setattr(greenbench.energy, "select_meter", lambda *a, **k: meter)
    power = IdlePower(IdleCache(tmp_path / "idle.json", clock=clock), clock=clock, watch=Watch)
    first, second = spec(), spec(seed=1)
    assert not power.get(first).reused
    clock.now += 30.0
    reused = power.get(second)
    assert reused.reused and reused.age_s == pytest.approx(31.0) and meter.samples == 1
    assert power.get(spec(**{"energy.idle_s": 0.0})).watts is None  # no baseline asked
    power.forget(second)  # its run's mean power came out below the baseline
    clock.now += 1.0
    assert not power.get(spec(seed=2)).reused and meter.samples == 2
    short = power.get(spec(**{"energy.idle_max_age_s": 0.5}))
    assert not short.reused and meter.samples == 3  # its own max age: 1 s is too old
