"""The planner against what was measured: layouts stored for this host, predicted and measured
side by side, with the prediction's error.

Each ok run of the same model, device type and device count on this host is predicted with its
**own** batch (sequence length, global batch, micro-batch, precision from its stored settings)
and layout, and compared with the medians of its stored repeats:

* step time: the window's seconds over its steps, and tokens/s;
* memory: where the run counted its model state from tensors (``state_bytes``: parameters,
  gradients, optimizer state and saved activations of the busiest rank,
  `greenbench.rank.state_memory`), against the predicted model state
  (`Memory.model_state_b`); the peak device memory of a GPU run against the predicted peak
  (`Memory.total_b`). Both count the same tensors the model counts, so their error shows the
  counting only. The process's own peak (``peak_mem_bytes``: a CPU rank's peak resident set,
  which also holds the interpreter, libraries and allocator caches; a GPU rank's peak allocated
  memory) is scored as well (``process_peak``) where the device knows a process's overhead
  (`DeviceModel.process_overhead_b`, fitted by the calibration): predicted as that overhead
  plus `Memory.total_b`; on a GPU as `Memory.total_b`;
* J/token from the GPU energy where stored (else the gross energy) — only where that energy was
  measured; an estimated energy gets no error, as no estimate is compared with a measurement.

Error is ``predicted / measured − 1``. Only runs of full rows (``lengths = fixed``) are set
against the planner, which predicts ``global_batch`` rows of ``seq_len`` tokens: a run of
variable lengths (LongAlign, SWE-smith) packs fewer, shorter rows.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenbench.models import ModelPreset
from greenbench.planner.calibrate import stored_runs
from greenbench.planner.cost import Batch, Prediction, predict
from greenbench.planner.device import DeviceModel
from greenbench.planner.runs import (
    PREDICTED_LENGTHS,
    process_peak_bytes,
    run_batch,
    run_layout,
    step_seconds,
)
from greenbench.vocabulary import Layout

__all__ = ["PREDICTED_LENGTHS", "Measured", "measured", "measured_layouts", "run_batch"]


@dataclass(frozen=True, slots=True)
class Measured:
    """One stored run: its medians (None where not stored or not measured) and the prediction
    for its own configuration."""

    run_id: str
    layout: Layout
    batch: Batch
    repeats: int
    tokens_per_s: float
    joules_per_token: float | None
    peak_mem_bytes: float | None  # peak device memory of a GPU run (None on CPU: RSS)
    predicted: Prediction
    step_s: float | None = None  # window seconds over steps
    state_bytes: float | None = None  # tensor-counted model state of the busiest rank
    process_peak_b: float | None = None  # the busiest process's peak (CPU: resident set)
    predicted_process_b: float | None = None  # None: no overhead fitted for a CPU process

    @property
    def memory_bytes(self) -> tuple[float | None, float]:
        """(measured, predicted) memory per device: model state where the run counted it,
        else the peak device memory against the predicted peak."""
        if self.state_bytes is not None:
            return self.state_bytes, self.predicted.memory.model_state_b
        return self.peak_mem_bytes, self.predicted.memory.total_b

    def errors(self) -> dict[str, float | None]:
        """Relative error of each prediction (``predicted / measured − 1``)."""

        def error(predicted: float, measured: float | None) -> float | None:
            return predicted / measured - 1 if measured else None

        return {
            "tokens_per_s": error(self.predicted.tokens_per_s, self.tokens_per_s),
            "step_s": error(self.predicted.step_s, self.step_s),
            "joules_per_token": error(self.predicted.joules_per_token, self.joules_per_token),
            "peak_mem_bytes": error(self.predicted.memory.total_b, self.peak_mem_bytes),
            "state_bytes": error(self.predicted.memory.model_state_b, self.state_bytes),
            "memory": error(self.memory_bytes[1], self.memory_bytes[0]),
            "process_peak": None
            if self.predicted_process_b is None
            else error(self.predicted_process_b, self.process_peak_b),
        }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def measured(run: dict[str, Any], shape: ModelPreset, device: DeviceModel) -> Measured | None:
    """``run`` (a `get_run` dict) set against its prediction, or None if it cannot be predicted
    (its batch does not divide over its layout, or its rows are not full)."""
    if run.get("lengths", PREDICTED_LENGTHS) != PREDICTED_LENGTHS:
        return None
    batch = run_batch(run)
    layout = run_layout(run)
    predicted = predict(shape, layout, batch, device)
    results = run["results"]
    if predicted is None or not results:
        return None
    joules = [
        (r.get("energy_gpu_j") or r["energy_j"]) / r["tokens"]
        for r in results
        if r.get("energy_measured") and (r.get("energy_gpu_j") or r.get("energy_j"))
        and r.get("tokens")
    ]  # fmt: skip
    gpu = run.get("device") != "cpu"
    overhead = 0.0 if gpu else device.process_overhead_b
    return Measured(
        run_id=run["run_id"],
        layout=layout,
        batch=batch,
        repeats=len(results),
        tokens_per_s=statistics.median(r["tokens_per_s"] for r in results),
        joules_per_token=_median(joules),
        peak_mem_bytes=_median([r["peak_mem_bytes"] for r in results if r.get("peak_mem_bytes")])
        if gpu
        else None,
        predicted=predicted,
        step_s=step_seconds(run),
        state_bytes=_median([r["state_bytes"] for r in results if r.get("state_bytes")]),
        process_peak_b=process_peak_bytes(run),
        predicted_process_b=None if overhead is None else overhead + predicted.memory.total_b,
    )


def measured_layouts(
    db: Path, shape: ModelPreset, devices: int, device: DeviceModel, host: str | None = None
) -> list[Measured]:
    """Every stored run of ``shape`` on ``devices`` devices of ``device``'s type on ``host``."""
    runs = stored_runs(db, device.label, host, model_family=shape.family, model_size=shape.size)
    found = []
    for run in runs:
        if int(run["nproc"]) * int(run["nnodes"]) != devices:
            continue
        m = measured(run, shape, device)
        if m is not None:
            found.append(m)
    return found
