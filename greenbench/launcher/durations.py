"""How long each configuration will take on this machine, estimated before it runs: what
`greenbench run --dry-run` prints per configuration and in total
(`greenbench.launcher.plan_preview`), and what the progress display's ETA starts from
(`greenbench.launcher.progress`, `Eta`).

Every estimate says where it came from:

* **from stored runs**: this machine's ok runs of the same configuration (its ``config_key``;
  else its seed group, the runs differing from it in the seed alone). "This machine" is the
  host, CPU model and logical cores its fingerprint stores (`this_machine`). The estimate is the
  median wall time of the latest `LATEST` of them: started → finished, which holds the idle
  baseline where one was sampled, the ranks' start (imports, process group, model), warm-up,
  every measured window and the storing.
* **model**: the steps the worker will train, each at the configuration's analytic FLOPs per
  step (`greenbench.launcher.preflight.need_of`) over its devices' sustained FLOP/s, plus a
  fixed start-up. The steps are the worker's: warm-up (`warmup_steps`), then per repeat
  ``train.steps`` lengthened to last ``train.min_window_s`` (× 1.1) up to ``train.max_steps``.
  The sustained FLOP/s per device and the start-up are this machine's, measured, where it has
  stored runs on the device: the median over them (of the same model family and ranks per node
  where there are some) of their windows' FLOPs over their seconds per device, and of their
  wall time less their windows and their warm-up steps at their median step. Without stored
  runs both are **assumed**: the device's peak (the cached CPU calibration, the GPU's datasheet
  figure) × `ASSUMED_SHARE_OF_PEAK`, and `ASSUMED_STARTUP_S`; the row says which. A run to a
  target is modelled at its step budget (an upper bound, "at most"); a fault-tolerant run as
  its one window of ``train.steps`` steps, with one more start-up per injected failure. A
  simulation, a user's workload (its model is its own) or a configuration with no peak known
  is unknown unless it has stored runs. The idle baseline (``energy.idle_s``, sampled once per
  session and device) is added to the first configuration that samples it.

Before the first configuration the launcher calibrates the CPU peak for each thread count and
precision this machine's cache lacks (`session_costs`).

The estimate of a whole run is the sum of its configurations' (those it runs); `Eta` keeps it
up to date as configurations finish: what is left is scaled by how the finished ones measured
against their estimates (their summed wall times over their summed estimates).
"""

from __future__ import annotations

import math
import os
import socket
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenbench.settings.runspec import RunSpec

#: stored runs of one configuration its estimate is the median of (the newest)
LATEST = 3
#: sustained FLOP/s per device as a share of the peak, until this machine has stored runs:
#: assumed. On a quiet 2-core CPU the posttrain suite's tiny models reached 9-78 % (median
#: 46 %) of the GEMM peak (a busy machine's smoke runs far less); a window lasts at least
#: ``train.min_window_s`` however fast its steps, so a share too high errs little and one too
#: low multiplies the estimate. On a GPU the shipped suites' 125m models reach about a third.
ASSUMED_SHARE_OF_PEAK = {"cpu": 0.3, "cuda": 0.3}
#: seconds from a configuration's start to its first step, until this machine has stored
#: runs: assumed. Interpreter start, imports, the process group and the model: about 9 s on a
#: 2-core CPU (the smoke suite, median); compilation adds more on a GPU.
ASSUMED_STARTUP_S = {"cpu": 10.0, "cuda": 30.0}
#: a CPU thread's GEMM FLOP/s where this machine has no calibration cached yet: assumed (one
#: core of a recent x86 server calibrates at 0.5-1e11 in fp32; the launcher measures it)
ASSUMED_CPU_FLOPS_PER_THREAD = 5e10
#: a window is lengthened to this share of ``train.min_window_s`` (the worker's margin)
WINDOW_MARGIN = 1.1

STORED, MODEL, UNKNOWN = "stored", "model", "unknown"


@dataclass(frozen=True, slots=True)
class Estimate:
    """One configuration's estimated seconds here (None: unknown), where they came from
    (``STORED``, ``MODEL`` or ``UNKNOWN``) and in a few words how (``how``)."""

    seconds: float | None
    source: str
    how: str
    at_most: bool = False  # an upper bound (a run to a target, at its step budget)

    @property
    def label(self) -> str:
        """The source as a row shows it: "from 3 stored runs", "estimate (model)"."""
        if self.source == STORED:
            return self.how
        if self.source == MODEL:
            return "estimate (model)"
        return "unknown"

    def text(self) -> str:
        """The seconds as a row shows them ("~2 min 10 s", "≤ 5 min", "—")."""
        if self.seconds is None:
            return "—"
        return ("≤ " if self.at_most else "~") + clock(self.seconds)


def clock(seconds: float) -> str:
    """Seconds as a short duration: "45 s", "3 min 20 s", "2 h 05 min"."""
    if not math.isfinite(seconds):
        return "forever"
    s = max(0, round(seconds))
    if s < 100:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def this_machine() -> tuple[str, str, int]:
    """This machine as its stored runs name it: (host, CPU model, logical cores), the parts of
    `greenbench.hardware.fingerprint.fingerprint` read without torch or a process."""
    from greenbench.hardware.machine import cpu_model

    return socket.gethostname(), cpu_model(), os.cpu_count() or 1


@dataclass(slots=True)
class History:
    """This machine's stored ok runs (`greenbench.store.machine_run_times`), newest first, as
    the estimates read them."""

    runs: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, db_path: Path, timeout_s: float = 8.0) -> History:
        """This machine's runs in ``db_path``, read-only (none where the file is absent: it is
        not created); StoreError where another process holds it past ``timeout_s``."""
        from greenbench.store import machine_run_times

        return cls(machine_run_times(db_path, *this_machine(), timeout_s=timeout_s))

    def of_config(self, key: str, seed_group: str | None) -> tuple[list[float], str]:
        """The latest `LATEST` wall times of the configuration ``key`` (else of its seed group)
        and which matched ("configuration" or "seed group")."""
        for column, value, what in (
            ("config_key", key, ""),
            ("seed_group", seed_group, " (seed group)"),
        ):
            if value is None:
                continue
            walls = [
                r["wall_s"] for r in self.runs if r[column] == value and _positive(r["wall_s"])
            ]
            if walls:
                return walls[:LATEST], what
        return [], ""

    def sustained_flops(
        self, device: str, family: str | None, nproc: int, flops_per_step: float
    ) -> tuple[float, int] | None:
        """(median FLOP/s per device, runs) of this machine's stored runs on ``device``: those of
        ``family`` at ``nproc`` ranks per node where there are some, else all on it; of those,
        the `LATEST` whose steps' FLOPs are nearest ``flops_per_step`` (a device reaches more of
        its peak on larger matrices)."""
        runs = [r for r in self._measured(device) if _positive(r["flops"])]
        close = [r for r in runs if r["model_family"] == family and r["nproc"] == nproc]
        chosen = close or runs
        if not chosen:
            return None

        def distance(r: dict[str, Any]) -> float:
            step_flops = r["flops"] / r["window_s"] * (r["step_p50_s"] or 0.0)
            if step_flops <= 0 or flops_per_step <= 0:
                return math.inf
            return abs(math.log(step_flops / flops_per_step))

        nearest = sorted(chosen, key=distance)[:LATEST]
        rates = [r["flops"] / r["window_s"] / (r["nproc"] * r["nnodes"]) for r in nearest]
        return statistics.median(rates), len(rates)

    def startup_s(self, device: str, nproc: int) -> tuple[float, int] | None:
        """(median start-up seconds, runs) of this machine's stored runs on ``device``: wall
        time less the windows and the warm-up steps at the median step; those at ``nproc``
        ranks per node where there are some."""
        runs = [r for r in self._measured(device) if _positive(r["step_p50_s"])]
        close = [r for r in runs if r["nproc"] == nproc]
        chosen = close or runs
        if not chosen:
            return None
        starts = [
            max(0.0, r["wall_s"] - r["window_s"] - _warm(r) * r["step_p50_s"]) for r in chosen
        ]
        return statistics.median(starts), len(starts)

    def _measured(self, device: str) -> list[dict[str, Any]]:
        return [
            r for r in self.runs
            if r["device"] == device and not r["simulated"] and _positive(r["window_s"])
            and _positive(r["wall_s"]) and r["nproc"] and r["nnodes"]
        ]  # fmt: skip


def _positive(value: Any) -> bool:
    try:
        return value is not None and float(value) > 0 and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _warm(run: dict[str, Any]) -> int:
    """The warm-up steps a stored run trained (its configuration's, by the worker's rule)."""
    from greenbench.config import read_section
    from greenbench.settings import TrainSettings

    config = run.get("config")
    settings = config.get("settings", {}) if isinstance(config, dict) else {}
    try:
        return warmup_steps(read_section(TrainSettings, settings))
    except Exception:  # an older or foreign record: count none
        return 0


def warmup_steps(train: Any) -> int:
    """The unmeasured steps the worker trains first (`greenbench.rank.worker.warmup_steps`:
    one more where there is only one and the window is lengthened)."""
    return train.warmup_steps + int(train.warmup_steps == 1 and train.min_window_s > 0)


def window_steps(train: Any, step_s: float, warm: int) -> int:
    """The steps of one measured window at ``step_s`` seconds a step
    (`greenbench.rank.worker.steps_per_window`)."""
    n = train.steps
    if warm:
        n = max(n, math.ceil(train.min_window_s * WINDOW_MARGIN / max(step_s, 1e-6)))
    return min(n, train.max_steps)


def estimate_all(
    specs: Sequence[RunSpec],
    history: History,
    peaks: Sequence[float | None],
    runs: Sequence[bool] | None = None,
) -> list[Estimate | None]:
    """Each spec's estimate here (None for those that do not run: ``runs`` False), from the
    stored ``history`` of this machine or the model with the devices' ``peaks`` (FLOP/s per
    device, None unknown). Specs are resolved (`greenbench.launcher.resolve`)."""
    out: list[Estimate | None] = []
    idle_taken: set[tuple[Any, ...]] = set()
    for i, spec in enumerate(specs):
        if runs is not None and not runs[i]:
            out.append(None)
            continue
        c = spec.config
        idle_key = (c.run.device, c.energy.source if c.energy is not None else "")
        wanted = float(c.energy.idle_s) if c.energy is not None else 0.0
        idle_s = 0.0 if idle_key in idle_taken else wanted
        idle_taken.add(idle_key)
        out.append(estimate_one(spec, history, peaks[i], idle_s))
    return out


def estimate_one(
    spec: RunSpec, history: History, peak: float | None, idle_s: float = 0.0
) -> Estimate:
    """``spec``'s estimate (module docstring); ``idle_s``: an idle baseline it samples first."""
    from greenbench.settings import spec_key, spec_seed_group

    walls, what = history.of_config(spec_key(spec), spec_seed_group(spec))
    if walls:
        n = len(walls)
        how = f"from {n} stored run{'s' if n > 1 else ''}{what}"
        return Estimate(statistics.median(walls), STORED, how)
    return model_estimate(spec, history, peak, idle_s)


def model_estimate(
    spec: RunSpec, history: History, peak: float | None, idle_s: float = 0.0
) -> Estimate:
    """``spec``'s modelled seconds (module docstring), or unknown with the reason."""
    from greenbench.launcher.runners.simulated import is_simulated
    from greenbench.settings.fault import fault_tolerant, kill_of

    c = spec.config
    if is_simulated(spec):
        return Estimate(None, UNKNOWN, "a simulation: no stored run of it yet")
    if c.model is None:
        return Estimate(None, UNKNOWN, "a user's workload (its model is its own): no stored run")
    from greenbench.launcher.preflight import need_of

    device, nproc = c.run.device, c.run.nproc
    need = need_of(spec)
    step_flops = need.flops_per_token * need.tokens_per_step
    rate = history.sustained_flops(device, c.model.family, nproc, step_flops)
    if rate is not None:
        flops_s, n = rate
        rate_how = f"{flops_s:.3g} FLOP/s per device measured ({n} stored runs)"
    elif peak or device == "cpu":
        share = ASSUMED_SHARE_OF_PEAK.get(device, ASSUMED_SHARE_OF_PEAK["cpu"])
        which = "the"
        if not peak:  # no calibration cached yet: the launcher will measure one
            from greenbench.launcher.execute import threads_per_rank

            peak, which = ASSUMED_CPU_FLOPS_PER_THREAD * threads_per_rank(nproc), "an assumed"
        flops_s = peak * share
        rate_how = f"{share:.0%} of {which} {peak:.3g} FLOP/s peak (assumed)"
    else:
        return Estimate(None, UNKNOWN, "no peak FLOP/s known for this GPU and no stored runs")
    started = history.startup_s(device, nproc)
    if started is not None:
        startup, n = started
        start_how = f"start-up {clock(startup)} measured ({n} stored runs)"
    else:
        startup = ASSUMED_STARTUP_S.get(device, ASSUMED_STARTUP_S["cpu"])
        start_how = f"start-up {clock(startup)} (assumed)"
    step_s = step_flops / (flops_s * need.world)
    train = c.train
    warm = warmup_steps(train)
    at_most = False
    if train.until == "target":
        budget = c.target
        per_repeat = budget.max_steps * step_s
        if budget.max_s:
            per_repeat = min(per_repeat, budget.max_s)
        steps_s = warm * step_s + c.run.repeats * per_repeat
        at_most = True
    elif fault_tolerant(c):
        steps_s = (train.warmup_steps + train.steps) * step_s
        startup *= 1 + (kill_of(c) is not None)
    else:
        steps_s = (warm + c.run.repeats * window_steps(train, step_s, warm)) * step_s
    how = (
        f"steps of {clock(step_s) if step_s >= 1 else f'{step_s:.2g} s'} at {rate_how}; {start_how}"
    )
    return Estimate(startup + idle_s + steps_s, MODEL, how, at_most)


def session_costs(
    specs: Sequence[RunSpec], runs: Sequence[bool] | None = None
) -> list[tuple[str, float]]:
    """What the launcher spends before the first configuration that this machine's caches
    decide: (what, seconds) for each CPU peak it must calibrate first (a thread count and
    precision the calibration cache holds no trusted figure for)."""
    from greenbench.hardware import peak_cache
    from greenbench.launcher.execute import threads_per_rank
    from greenbench.launcher.runners import runner_for

    missing: set[tuple[int, str]] = set()
    for i, spec in enumerate(specs):
        if (runs is not None and not runs[i]) or spec.config.run.device != "cpu":
            continue
        if not runner_for(spec).shape(spec).launches_ranks:
            continue
        key = (
            threads_per_rank(spec.config.run.nproc),
            peak_cache.dtype_name(spec.config.run.precision),
        )
        entry = peak_cache.cached_entry(*key)
        if entry is None or not entry["trusted"]:
            missing.add(key)
    return [
        (f"CPU peak calibration ({threads} thread(s), {dtype})", peak_cache.DEFAULT_BUDGET_S)
        for threads, dtype in sorted(missing)
    ]


@dataclass(slots=True)
class Eta:
    """A run's ETA from its configurations' estimates, kept up to date as they finish: the
    estimates still ahead are scaled by the finished ones' measured over estimated seconds."""

    estimates: dict[int, float | None]  # by configuration index, those that run
    measured: float = 0.0
    estimated: float = 0.0
    done: set[int] = field(default_factory=set)

    @property
    def scale(self) -> float:
        """Measured over estimated seconds of the finished configurations (1 before any)."""
        return self.measured / self.estimated if self.estimated > 0 else 1.0

    def finish(self, index: int, seconds: float) -> None:
        """Configuration ``index`` finished after ``seconds``."""
        self.done.add(index)
        estimate = self.estimates.get(index)
        if estimate:
            self.measured += seconds
            self.estimated += estimate

    def left(self, index: int | None, elapsed: float) -> tuple[float | None, float | None]:
        """(seconds left of configuration ``index``, of the whole run), the current one at
        ``elapsed`` seconds; None where an estimate is unknown. Never below 0."""
        scale = self.scale
        current = None
        if index is not None and self.estimates.get(index) is not None:
            current = max(0.0, self.estimates[index] * scale - elapsed)
        ahead = [j for j in self.estimates if j not in self.done and j != index]
        if any(self.estimates[j] is None for j in ahead) or (index is not None and current is None):
            return current, None
        total = sum(self.estimates[j] * scale for j in ahead) + (current or 0.0)
        return current, total
