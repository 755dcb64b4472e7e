"""``greenbench.measure``: measure one's own training loop, rank-aware, into the results database.

    with greenbench.measure(label="main") as m:
        for batch in loader:
            train_step(batch)
            m.step(tokens=batch_tokens)

The window is greenbench's (`greenbench.rank.worker`): it opens when the last warm-up step
ends (``warmup_steps``, default 1, are not measured) and closes when the block ends, with the
device synchronised at both ends and at every step (so step times are the device's, not the
host's queueing). Under torchrun each rank reads its own meter as a worker does (its GPU; CPU and
DRAM once per node, by local rank 0: `greenbench.energy.select`), and when the block ends every
rank's window is gathered on rank 0 through ``torch.distributed`` (so the process group must be
initialised by then), which stores one run with a row per rank. Tokens/s and joules per token
come from the tokens given to ``m.step``; MFU only when FLOPs per token are given (labelled so),
never guessed.

A block that raises stores nothing from the other ranks (no collective is attempted): rank 0
stores the run as failed with the error, and the exception goes on. One measure object may be
used for several ``with`` blocks, one after the other: each block is its own run (its own warm-up,
its own run id, the same name and label).

A bad argument is a `MeasureArgumentError` (a ``ValueError``, and greenbench's bad input): those
of ``measure`` when it is called, before anything is measured; those of ``m.step`` (``tokens`` a
whole number >= 0, ``flops`` a finite number >= 0) at that call, with nothing of that step
counted.
"""

from __future__ import annotations

import math
import operator
import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from greenbench.energy.base import EnergyWindow, Meter
from greenbench.errors import GreenbenchError, SpecError
from greenbench.measuring.record import LOOP_STRATEGY, check_name, run_record, store_run
from greenbench.results import RankResult
from greenbench.user.contract import FLOPS_GIVEN

DB_ENV = "GREENBENCH_DB"


class MeasureArgumentError(SpecError, ValueError):
    """A bad argument to `measure` or to ``m.step``: a ``ValueError`` to the calling script."""


def measure(
    name: str | None = None,
    *,
    label: str | None = None,
    db: str | Path | None = None,
    warmup_steps: int = 1,
    flops_per_token: float | None = None,
    settings: Mapping[str, Any] | None = None,
    device: str = "auto",
    precision: str = "auto",
    energy_source: str = "auto",
    region: str = "world",
    idle_s: float = 0.0,
) -> Measurement:
    """A measurement of the loop inside the ``with`` block (see the module docstring).

    ``name`` says what is measured (default: the script's file name) and, with ``settings``
    (the loop's own, e.g. ``{"batch": 32}``), the device and the ranks, makes the
    configuration; ``label`` tags the run for ``greenbench compare`` (e.g. ``base``, ``head``).
    ``db`` defaults to ``$GREENBENCH_DB`` or ``./greenbench.duckdb``. ``precision`` (fp32, bf16,
    or auto: fp32 on CPU, bf16 on CUDA) picks the peak MFU is relative to. ``idle_s`` > 0
    samples idle power first (local rank 0), for net energy.
    """
    return Measurement(
        name=check_name(name or Path(sys.argv[0] or "python").name or "python"),
        label=label,
        db=Path(db or os.environ.get(DB_ENV, "greenbench.duckdb")),
        warmup_steps=warmup_steps,
        flops_per_token=flops_per_token,
        settings=dict(settings or {}),
        device=device,
        precision=precision,
        energy_source=energy_source,
        region=region,
        idle_s=idle_s,
    )


class Measurement:
    """One use of `measure`: ``m.step(tokens=...)`` after every training step; ``m.run_id``
    (on rank 0, once the block has ended) names the stored run."""

    def __init__(
        self,
        *,
        name: str,
        label: str | None,
        db: Path,
        warmup_steps: int,
        flops_per_token: float | None,
        settings: dict[str, Any],
        device: str,
        precision: str,
        energy_source: str,
        region: str,
        idle_s: float,
    ) -> None:
        from greenbench.config import setting_of
        from greenbench.energy.carbon import carbon_intensity_g_per_kwh
        from greenbench.energy.settings import MAX_IDLE_S
        from greenbench.settings import EnergySettings, RunSettings

        choices = {
            "device": setting_of(RunSettings, "device").choices,
            "precision": setting_of(RunSettings, "precision").choices,
            "energy_source": setting_of(EnergySettings, "source").choices,
        }

        def one_of(argument: str) -> str:
            return f"one of {', '.join(choices[argument])}"

        checks: list[tuple[str, Any, bool]] = [
            ("warmup_steps", warmup_steps, "a whole number >= 0", _whole(warmup_steps) is None),
            (
                "flops_per_token",
                flops_per_token,
                "a finite number > 0, or None",
                flops_per_token is not None and not _finite(flops_per_token, low=0.0, strict=True),
            ),
            ("device", device, one_of("device"), device not in choices["device"]),
            (
                "precision",
                precision,
                f"{one_of('precision')} (the peak MFU is relative to)",
                precision not in choices["precision"],
            ),
            (
                "energy_source",
                energy_source,
                one_of("energy_source"),
                energy_source not in choices["energy_source"],
            ),
            (
                "idle_s",
                idle_s,
                f"a number of seconds from 0 to {MAX_IDLE_S:g}",
                not _finite(idle_s, low=0.0) or idle_s > MAX_IDLE_S,
            ),
        ]
        for argument, value, expected, wrong in checks:
            if wrong:
                raise MeasureArgumentError(
                    f"greenbench.measure({name!r}): {argument} must be {expected}, got {value!r}"
                )
        self.name, self.label, self.db = name, label, db
        self.warmup_steps = operator.index(warmup_steps)
        self.flops_per_token = None if flops_per_token is None else float(flops_per_token)
        self.settings = settings
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        self.precision = (
            ("bf16" if self.device == "cuda" else "fp32") if precision == "auto" else precision
        )
        self.energy_source, self.region, self.idle_s = energy_source, region, idle_s
        self.carbon = carbon_intensity_g_per_kwh(region)[0]  # SpecError for an unknown region
        self.rank = int(os.environ.get("RANK", 0))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.nproc = int(os.environ.get("LOCAL_WORLD_SIZE", self.world))
        self.run_id: str | None = None
        self._meter: Meter | None = None
        self._start_block()

    def _start_block(self) -> None:
        """Forget the last block's steps: each ``with`` block is its own run."""
        self._steps = 0
        self._tokens = 0
        self._flops = 0.0
        self._losses: list[float] = []
        self._step_times: list[float] = []
        self._window_start: float | None = None
        self._last = 0.0
        self._closed_at = 0.0
        self._idle_w: float | None = None

    # ------------------------------------------------------------------- the with block

    def __enter__(self) -> Measurement:
        from greenbench.energy import select_meter

        if self._meter is not None:
            raise RuntimeError(
                f"greenbench.measure({self.name!r}) is already measuring a with-block: blocks "
                "of one measure object run one after the other, not one inside another"
            )
        if self.device == "cuda" and not torch.cuda.is_available():
            raise GreenbenchError("greenbench.measure(device='cuda'): torch sees no CUDA device")
        self._start_block()
        self.run_id = None
        self._meter = select_meter(
            self.device,
            None if self.energy_source == "auto" else self.energy_source,
            gpu_indices=[self._gpu()] if self.device == "cuda" else [],
            local_rank=self.local_rank,
        )
        try:
            if self.idle_s > 0 and self.local_rank == 0:
                self._idle_w = self._meter.idle_power_w(self.idle_s)
            self._sync()
            self._last = time.perf_counter()
            if self.warmup_steps == 0:
                self._open()
        except BaseException:
            self._meter.close()
            self._meter = None
            raise
        return self

    def step(self, tokens: int, *, flops: float | None = None, loss: float | None = None) -> None:
        """One training step ended: ``tokens`` real tokens trained on this rank (``flops``:
        this step's FLOPs, when known per step instead of per token; ``loss``: its loss).

        `MeasureArgumentError` (a ``ValueError``) for tokens that are not a whole number >= 0
        or FLOPs that are not a finite number >= 0, with nothing of this step counted."""
        if self._meter is None:
            raise RuntimeError(
                f"greenbench.measure({self.name!r}): m.step() outside the with-block; call it "
                "after each training step inside `with greenbench.measure(...) as m:`"
            )
        count = _whole(tokens)
        if count is None:
            raise MeasureArgumentError(
                f"m.step(tokens=...) needs a whole number >= 0, got {tokens!r}"
            )
        if flops is not None and not _finite(flops, low=0.0):
            raise MeasureArgumentError(
                f"m.step(flops=...) needs a finite number >= 0 (this step's FLOPs), got {flops!r}"
            )
        self._sync()
        now = time.perf_counter()
        self._steps += 1
        if self._window_start is None:
            if self._steps >= self.warmup_steps:
                self._last = now
                self._open()
            return
        self._step_times.append(now - self._last)
        self._last = now
        self._tokens += count
        if flops is not None:
            self._flops += float(flops)
        elif self.flops_per_token is not None:
            self._flops += self.flops_per_token * count
        if loss is not None:
            self._losses.append(float(loss))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        window = self._close()
        if exc_type is not None:
            if self.rank == 0:
                self._store([], status="failed", error=f"{exc_type.__name__}: {exc}")
            return False
        if not self._step_times:
            raise SpecError(
                f"greenbench.measure({self.name!r}): the loop ran {self._steps} step(s), all "
                f"warm-up (warmup_steps={self.warmup_steps}), so nothing was measured; "
                "nothing stored"
            )
        ranks = self._gather(self._result(window))
        if ranks is not None:
            self.run_id = self._store(ranks)
        return False

    # ------------------------------------------------------------------- parts

    def _gpu(self) -> int:
        return self.local_rank if self.world > 1 else torch.cuda.current_device()

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _open(self) -> None:
        assert self._meter is not None
        self._meter.begin()
        self._window_start = time.perf_counter()

    def _close(self) -> EnergyWindow | None:
        if self._meter is None:
            return None
        self._sync()
        self._closed_at = time.perf_counter()
        window = self._meter.end() if self._window_start is not None else None
        self._meter.close()
        self._meter = None
        return window

    def _result(self, window: EnergyWindow | None) -> RankResult:
        assert self._window_start is not None
        seconds = max(self._closed_at - self._window_start, 1e-9)  # as long as the meter's
        loss = math.fsum(self._losses) / len(self._losses) if self._losses else math.nan
        return RankResult(
            rank=self.rank, local_rank=self.local_rank, host=socket.gethostname(), repeat=0,
            tokens=self._tokens, seconds=seconds, compute_s=seconds, comm_s=0.0, wait_s=0.0,
            step_times_s=tuple(self._step_times),
            peak_mem_bytes=self._peak_memory(),
            flops=self._flops, loss=loss, n_microbatches=len(self._step_times), energy=window,
        )  # fmt: skip

    def _peak_memory(self) -> int:
        """This rank's peak device memory (CUDA) or its process's peak resident set (CPU, over
        the whole process: the loop cannot reset it as greenbench's workers do)."""
        if self.device == "cuda":
            return int(torch.cuda.max_memory_allocated())
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

    def _gather(self, mine: RankResult) -> list[RankResult] | None:
        """Every rank's result on rank 0 (None on the others)."""
        if self.world == 1:
            return [mine]
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise GreenbenchError(
                f"greenbench.measure({self.name!r}) runs on {self.world} ranks (WORLD_SIZE) and "
                "gathers them through torch.distributed: initialise the process group before "
                "the with-block ends"
            )
        out: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(mine.to_dict(), out, dst=0)
        if out is None:
            return None
        return [RankResult.from_dict(d) for d in out]

    def _store(self, ranks: list[RankResult], status: str = "ok", error: str | None = None) -> str:
        from greenbench.hardware.fingerprint import fingerprint
        from greenbench.measuring.record import by_key, device_type
        from greenbench.settings import EnergySettings, RunSettings, TrainSettings
        from greenbench.store import new_run_id

        settings = (
            {"measure.scope": "window"}
            | by_key(
                RunSettings,
                device=self.device,
                precision=self.precision,
                nproc=self.nproc,
                nnodes=max(1, self.world // self.nproc),
            )
            | by_key(TrainSettings, warmup_steps=self.warmup_steps)
            | by_key(EnergySettings, source=self.energy_source, region=self.region)
            | {f"user.{k}": v for k, v in sorted(self.settings.items())}
        )
        own = " ".join(f"{k}={v}" for k, v in sorted(self.settings.items()))
        record = run_record(
            run_id=new_run_id(),
            workload=f"loop/{self.name}",
            config_name=f"{self.name}{f' {own}' if own else ''} own loop×{self.world}",
            strategy=LOOP_STRATEGY,
            settings=settings,
            label=self.label,
            device_type=device_type(self.device),
            fingerprint=fingerprint(),
            carbon_g_per_kwh=self.carbon,
            model_size=self.name,
        )
        counted = any(r.flops > 0 for r in ranks)
        return store_run(
            self.db,
            record,
            ranks,
            idle_power_w=self._idle_w,
            peak=self._peak() if counted else (None, None),
            carbon_g_per_kwh=self.carbon,
            mfu_note=FLOPS_GIVEN if counted else "",
            status=status,
            error=error,
        )

    def _peak(self) -> tuple[float | None, str | None]:
        """The peak MFU is relative to: a GPU's datasheet figure, or this CPU's calibration."""
        from greenbench.hardware import cpu_peak, gpus

        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        if self.device == "cuda":
            found = gpus.gpu_peak_flops(torch.cuda.get_device_name(0), self.precision)
            return (found[0], found[1]) if found else (None, None)
        threads = max(1, torch.get_num_threads())
        return cpu_peak.cpu_gemm_peak_flops(threads, dtype), cpu_peak.CPU_GEMM_SOURCE


def _whole(value: Any) -> int | None:
    """``value`` as a whole number >= 0 (an int, a numpy integer, a one-element integer tensor),
    or None where it is not one (a bool, a float, a negative number)."""
    if isinstance(value, bool):
        return None
    try:
        whole = operator.index(value)
    except TypeError:
        return None
    return whole if whole >= 0 else None


def _finite(value: Any, *, low: float, strict: bool = False) -> bool:
    """Whether ``value`` is a number (a float, an int, a numpy or one-element torch scalar; not a
    bool nor a string), finite, and >= ``low`` (> where ``strict``)."""
    if isinstance(value, (bool, str, bytes)):
        return False
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several elements
        return False
    return math.isfinite(number) and (number > low if strict else number >= low)
