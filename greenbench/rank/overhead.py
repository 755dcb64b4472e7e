"""What measuring costs a training step, measured directly on this machine.

The goal (≤ 0.1 % of a step on a GPU) is checked by timing the measurement itself, never as the
difference of two noisy runs with and without it. Two things run alongside the training step:

* **The meter.** A window is ``meter.begin()`` … steps … ``meter.end()`` (the worker's
  `train_and_measure`): each end reads the meter once, so a window of ``n`` steps costs two
  readings, ``2 / n`` per step. Meters without an energy counter also read on a sampler
  thread: NVML's power polling (`NvmlMeter.poll_s`, only for GPUs without the counter) and
  RAPL's wrap-around checkpoints (`RaplMeter.poll_s`), ``step_s / poll_s`` readings per step.
  One reading is half of a timed ``begin()`` + ``end()`` pair: each end of a window reads every
  counter once (and, for a polling meter, takes one power sample and starts or stops its
  thread), so half a pair is never cheaper than one sampler reading. Zeus's own monitor
  processes (RAPL wrap-around) run outside this process and are not counted; its begin/end
  pair is timed like any other.
* **The per-step timers.** The worker reads the clock before and after each step; the shared
  training step (`StepSchedule.train_step`) reads it at its start, synchronises the device and
  reads it again, and asks the communication recorder what the step recorded. `timer_cost_s`
  times exactly those calls, with the synchronisation on the run's device (on an idle device:
  the wait for the step's own work is the step, not the timer).

`measure_overhead` puts both against a step time and returns an `Overhead`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from greenbench.energy.base import Meter


@dataclass(frozen=True, slots=True)
class Overhead:
    """The measurement's cost per training step, and its parts (seconds)."""

    meter: str  # the meter's source: nvml, zeus, rapl, estimate
    step_s: float  # the step time the costs are set against
    steps_per_window: int
    reading_s: float  # one meter reading
    sampler_hz: float  # readings per second on the meter's sampler thread (0: none)
    timers_s: float  # the per-step timers' own cost, synchronisation included

    @property
    def readings_per_step(self) -> float:
        """The window's two readings spread over its steps, plus the sampler's during a step."""
        return readings_per_step(self.sampler_hz, self.step_s, self.steps_per_window)

    @property
    def meter_s(self) -> float:
        """Seconds of meter readings per step."""
        return self.reading_s * self.readings_per_step

    @property
    def per_step_s(self) -> float:
        return self.meter_s + self.timers_s

    @property
    def fraction(self) -> float:
        """The measurement's share of a step (0.001 is 0.1 %)."""
        return self.per_step_s / self.step_s


def readings_per_step(sampler_hz: float, step_s: float, steps_per_window: int) -> float:
    """Meter readings per step: ``begin`` and ``end`` once per window of ``steps_per_window``
    steps, and a sampler reading every ``1 / sampler_hz`` seconds of each step."""
    if steps_per_window < 1:
        raise ValueError(f"steps_per_window must be at least 1, got {steps_per_window}")
    if step_s <= 0:
        raise ValueError(f"step_s must be positive, got {step_s}")
    return 2.0 / steps_per_window + max(sampler_hz, 0.0) * step_s


def sampler_hz(meter: Meter) -> float:
    """How often ``meter`` reads on a thread of its own while a window is open (0: never)."""
    from greenbench.energy.nvml import NvmlMeter
    from greenbench.energy.rapl import RaplMeter

    if isinstance(meter, NvmlMeter):
        return 1.0 / meter.poll_s if meter.polled_devices else 0.0
    if isinstance(meter, RaplMeter):
        return 1.0 / meter.poll_s
    return 0.0


def per_call_s(fn: Callable[[], Any], calls: int, rounds: int = 5) -> float:
    """The median over ``rounds`` of the mean seconds per call of ``fn`` over ``calls`` calls."""
    if calls < 1 or rounds < 1:
        raise ValueError(f"need calls >= 1 and rounds >= 1, got {calls=} {rounds=}")
    means = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter() - start) / calls)
    return statistics.median(means)


def reading_cost_s(meter: Meter, calls: int = 100) -> float:
    """Seconds of one reading of ``meter``: half of a ``begin()`` + ``end()`` pair, timed over
    ``calls`` pairs (see the module docstring)."""

    def pair() -> None:
        meter.begin()
        meter.end()

    pair()  # first-call costs (imports, allocations) are not a reading's
    return per_call_s(pair, calls) / 2.0


def timer_cost_s(device: Any = "cpu", calls: int = 2000) -> float:
    """Seconds the per-step timers cost one step on ``device``: the worker's two clock reads,
    the training step's two and its device synchronisation, its `StepTimes` and the
    communication recorder's mark and look-up."""
    import torch

    from greenbench.distributed.comm import CommRecorder
    from greenbench.distributed.device import StepTimes, synchronize

    device = torch.device(device)
    comm = CommRecorder(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the context exists and the queue is empty

    def timers() -> None:
        t0 = time.perf_counter()  # the worker, before the step
        times = StepTimes()
        mark = comm.mark()
        start = time.perf_counter()  # train_step
        synchronize(device)
        total = time.perf_counter() - start
        recorded = [c for c in comm.since(mark) if c.events is None]
        times.wait_s = math.fsum(c.seconds for c in recorded if c.waits)
        times.comm_s = math.fsum(c.seconds for c in recorded if not c.waits)
        times.compute_s = total - times.wait_s - times.comm_s
        _ = time.perf_counter() - t0  # the worker, after the step

    return per_call_s(timers, calls)


def measure_overhead(
    meter: Meter,
    *,
    step_s: float,
    steps_per_window: int,
    device: Any = "cpu",
    reading_calls: int = 100,
    timer_calls: int = 2000,
) -> Overhead:
    """Time ``meter``'s readings and the per-step timers on ``device`` here, and set them
    against a step of ``step_s`` seconds in windows of ``steps_per_window`` steps."""
    readings_per_step(0.0, step_s, steps_per_window)  # validates both
    return Overhead(
        meter=getattr(meter, "mirrors", type(meter)).source,  # a NullMeter stands in for one
        step_s=step_s,
        steps_per_window=steps_per_window,
        reading_s=reading_cost_s(meter, reading_calls),
        sampler_hz=sampler_hz(meter),
        timers_s=timer_cost_s(device, timer_calls),
    )
