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
  (`Memory.total_b`). A CPU run's ``peak_mem_bytes`` is its process's resident set (the
  interpreter, libraries, allocator caches), which the model does not predict: it gets no error;
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

from greenbench.config import read_section
from greenbench.data.settings import DataSettings
from greenbench.models import ModelPreset
from greenbench.planner.calibrate import stored_runs
from greenbench.planner.cost import Batch, Prediction, predict
from greenbench.planner.device import DeviceModel
from greenbench.vocabulary import Layout

PREDICTED_LENGTHS = "fixed"  #: the only length distribution the planner predicts


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
        }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def run_batch(run: dict[str, Any]) -> Batch:
    """The batch ``run`` (a `get_run` dict) trained per optimizer step."""
    data = read_section(DataSettings, run["config"]["settings"])
    return Batch(
        seq_len=int(run["seq_len"]),
        global_batch=int(data.global_batch),
        micro_batch=int(data.micro_batch),
        precision=str(run["precision"]),
    )


def measured(run: dict[str, Any], shape: ModelPreset, device: DeviceModel) -> Measured | None:
    """``run`` (a `get_run` dict) set against its prediction, or None if it cannot be predicted
    (its batch does not divide over its layout, or its rows are not full)."""
    if run.get("lengths", PREDICTED_LENGTHS) != PREDICTED_LENGTHS:
        return None
    batch = run_batch(run)
    layout = Layout.parse(str(run["layout"]), strategy=run["strategy"])
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
    steps = [r["seconds"] / len(r["step_times_s"]) for r in results if r.get("step_times_s")]
    gpu = run.get("device") != "cpu"
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
        step_s=_median(steps),
        state_bytes=_median([r["state_bytes"] for r in results if r.get("state_bytes")]),
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
