"""The worker's per-step timer on CUDA (``pytest -m cuda``; skipped without a GPU): its step
times agree with CUDA events recorded around the same training steps.

Device work is asynchronous: a clock read without synchronising would stop when the step's
kernels are queued, not when they finish, and step times would fall far below the events'.
The shared training step (`StepSchedule.train_step`) synchronises before returning; this checks
that the times the worker stores (``step_times_s``) are the device's."""

from __future__ import annotations

import pytest
import torch

from greenbench.launcher.resolve import resolve_spec
from greenbench.rank import worker
from greenbench.spec import expand
from greenbench.strategies.schedule import StepSchedule

pytestmark = pytest.mark.cuda

STEPS, WARMUP = 6, 2


def test_the_workers_step_times_agree_with_cuda_events(monkeypatch: pytest.MonkeyPatch) -> None:
    (spec,) = expand(
        "transformer-vs-mamba",
        [
            {
                "model.family": "transformer", "model.size": "125m", "device": "cuda",
                "precision": "bf16", "data.seq_len": 1024, "data.global_batch": 8,
                "data.micro_batch": 4, "train.warmup_steps": WARMUP, "train.steps": STEPS,
                "train.max_steps": STEPS, "train.min_window_s": 0.0, "repeats": 1,
                "energy.source": "estimate", "energy.idle_s": 0.0,
            }
        ],
    )  # fmt: skip
    spec = resolve_spec(spec)
    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    train_step = StepSchedule.train_step

    def with_events(self, model, optimizer, batch, before_microbatch=None):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = train_step(self, model, optimizer, batch, before_microbatch)
        end.record()
        events.append((start, end))
        return out

    monkeypatch.setattr(StepSchedule, "train_step", with_events)
    (result,) = worker.run_rank(spec)
    torch.cuda.synchronize()
    assert len(events) == WARMUP + STEPS and len(result.step_times_s) == STEPS
    device_s = [start.elapsed_time(end) / 1e3 for start, end in events[WARMUP:]]
    assert min(device_s) > 5e-3  # 8 × 1024 tokens through 125m parameters: real device work
    for timed, device in zip(result.step_times_s, device_s, strict=True):
        # the worker's clock also holds a little host work around the step (< 1 ms)
        assert device * 0.98 <= timed <= device * 1.05 + 1e-3, (result.step_times_s, device_s)
    assert result.seconds >= sum(device_s)
