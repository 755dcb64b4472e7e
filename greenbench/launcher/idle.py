"""The node's idle power, for net energy: sampled while watched, and reused while fresh and quiet.

Net energy is gross energy minus idle power × seconds. Sampling it costs ``energy.idle_s``
seconds and a meter's start before a run, and it is a property of the machine, not of the run,
so a baseline serves later configurations of the session and later runs on this machine (a
cache file, ``cache_dir()/idle.json``: ``$GREENBENCH_CACHE_DIR`` or ``~/.cache/greenbench``)
while all of this holds:

- **quiet**: while it was sampled, `ContentionWatch` saw no other greenbench process and other
  processes kept at most a tenth of the cores busy. A sample taken otherwise serves its own run
  only, with why it is unreliable (net energy is then unknown), and is never reused;
- **fresh**: younger than ``energy.idle_max_age_s`` (600 s by default) when a run begins; at that
  age or older it is sampled again. 0 samples for every configuration;
- **the same machine and meter**: the key holds the machine's fingerprint
  (`greenbench.hardware.machine.machine_key`), the device, the energy source that read it, the
  devices metered and the idle window; a change of any of them finds no entry;
- **not proven stale**: a run whose mean power comes out below the baseline shows it no longer
  holds (`forget`): it is dropped, and the next run samples again.

Each run stores what its baseline cost it (``runs.harness_baseline_s``: 0 when reused) and a
reused one's age when the run began (``runs.idle_baseline_age_s``), which `greenbench show`
prints. An emulated GPU's idle power is its model's, whatever the machine does: read once a
session, never watched, never written to the cache file.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenbench.hardware.machine import cache_dir, machine_key, read_json, write_json
from greenbench.launcher.phases import NO_PHASES, Phases
from greenbench.rank.contention import ContentionWatch

if TYPE_CHECKING:
    from greenbench.energy.base import Meter
    from greenbench.settings.runspec import RunSpec

FILE = "idle.json"


@dataclass(frozen=True, slots=True)
class IdleBaseline:
    """A run's idle power: ``watts`` (None: none, or unknown), ``why`` it is unreliable ("" if
    it is not), the ``seconds`` sampling it cost this run (0 when reused) and a reused one's
    ``age_s`` when the run began (None: sampled for this run)."""

    watts: float | None
    why: str = ""
    seconds: float | None = None
    age_s: float | None = None

    @property
    def reused(self) -> bool:
        return self.age_s is not None


NO_BASELINE = IdleBaseline(None)


def baseline_key(device: str, source: str, devices: Sequence[int], idle_s: float) -> str:
    """The key of a baseline: this machine's fingerprint, and what its figure depends on."""
    metered = ",".join(str(d) for d in devices) or "-"
    return f"{machine_key()}|{device}|{source}|devices={metered}|idle_s={idle_s:g}"


class IdleCache:
    """Quiet baselines by key, with when they were taken: in memory for the session, and in
    ``path`` (default ``cache_dir()/idle.json``) for later runs; a cache that cannot be read
    or written only costs a new sample."""

    def __init__(self, path: Path | None = None, *, clock: Callable[[], float] = time.time):
        self.path = path
        self.clock = clock
        self._mine: dict[str, dict[str, Any]] = {}

    def _file(self) -> Path:
        return self.path or cache_dir() / FILE

    def fresh(self, key: str, max_age_s: float) -> tuple[float, float] | None:
        """(watts, age in seconds) of a quiet baseline younger than ``max_age_s``, or None."""
        if max_age_s <= 0:
            return None
        entry = self._mine.get(key) or read_json(self._file()).get(key)
        if not isinstance(entry, dict) or entry.get("quiet") is not True:
            return None
        watts, taken = entry.get("watts"), entry.get("taken_at")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (watts, taken)):
            return None
        age = self.clock() - float(taken)
        if not 0 <= age < max_age_s:  # a clock stepped back vouches for nothing either
            return None
        return float(watts), age

    def put(self, key: str, watts: float, taken_at: float, others_busy_cores: float | None):
        """Keep a baseline sampled at ``taken_at`` on a quiet machine."""
        entry = {"watts": watts, "taken_at": taken_at, "quiet": True,
                 "others_busy_cores": others_busy_cores}  # fmt: skip
        self._mine[key] = entry
        path = self._file()
        write_json(path, {**read_json(path), key: entry})

    def forget(self, key: str) -> None:
        """Drop a baseline (a run proved it stale)."""
        self._mine.pop(key, None)
        path = self._file()
        stored = read_json(path)
        if key in stored:
            write_json(path, {k: v for k, v in stored.items() if k != key})


def sample(
    meter: Meter,
    idle_s: float,
    *,
    clock: Callable[[], float] = time.time,
    watch: Callable[[], ContentionWatch] | None = None,
) -> tuple[float | None, str, float, ContentionWatch]:
    """(watts, why unreliable or "", seconds it took, the watch) of one idle sample of
    ``meter`` over ``idle_s`` seconds, watched for contention (``watch``: `ContentionWatch`)."""
    started = clock()
    with (watch or ContentionWatch)() as seen:
        watts = meter.idle_power_w(idle_s)
    why = f"idle power sampled while {seen.seen}" if seen.contended else ""
    return watts, why, max(0.0, clock() - started), seen


def baseline(
    meter: Meter,
    key: str,
    idle_s: float,
    max_age_s: float,
    cache: IdleCache,
    *,
    clock: Callable[[], float] = time.time,
    watch: Callable[[], ContentionWatch] | None = None,
    phases: Phases = NO_PHASES,
) -> IdleBaseline:
    """A fresh quiet baseline from ``cache`` if there is one, else one sampled from ``meter``
    (kept in ``cache`` when it was taken quiet; ``phases`` told when it is). ``idle_s`` 0: no
    baseline."""
    if idle_s <= 0:
        return NO_BASELINE
    found = cache.fresh(key, max_age_s)
    if found is not None:
        return IdleBaseline(found[0], seconds=0.0, age_s=found[1])
    phases.tell(f"idle baseline ({idle_s:g} s)")
    taken_at = clock()
    watts, why, seconds, seen = sample(meter, idle_s, clock=clock, watch=watch)
    if watts is not None and not why:
        cache.put(key, watts, taken_at, seen.others_busy_cores)
    return IdleBaseline(watts, why, seconds)


class IdlePower:
    """The idle power of this node for each configuration of a session (module docstring).

    ``cache``, ``clock`` and ``watch`` stand for the cache file, the wall clock and the
    contention watch (tests)."""

    def __init__(
        self,
        cache: IdleCache | None = None,
        *,
        clock: Callable[[], float] = time.time,
        watch: Callable[[], ContentionWatch] | None = None,
    ) -> None:
        self.cache = cache or IdleCache(clock=clock)
        self.clock = clock
        self.watch = watch
        self._keys: dict[int, str] = {}  # id of a spec → the key its baseline is under
        self._modelled: dict[tuple[str, int, float], tuple[float | None, float]] = {}

    def get(self, spec: RunSpec, phases: Phases = NO_PHASES) -> IdleBaseline:
        """``spec``'s idle baseline: reused where fresh and quiet, else sampled now (``phases``
        told)."""
        from greenbench.energy import select_meter
        from greenbench.rank import emulated_gpu

        c = spec.config
        run, energy, emulated = c.run, c.energy, emulated_gpu.emulated(spec)
        if energy.idle_s <= 0:
            return NO_BASELINE
        devices = list(range(run.nproc)) if run.device == "cuda" else []
        if emulated:  # the emulated GPUs' idle power, from their model: once a session
            model = (emulated, run.nproc, energy.idle_s)
            if model in self._modelled:
                watts, taken_at = self._modelled[model]
                return IdleBaseline(watts, seconds=0.0, age_s=max(0.0, self.clock() - taken_at))
            meter = emulated_gpu.meter(emulated, range(run.nproc), sample_power=False)
            phases.tell(f"idle baseline ({energy.idle_s:g} s, modelled)")
            taken_at = self.clock()
            try:
                watts, _, seconds, _ = sample(meter, energy.idle_s, clock=self.clock,
                                              watch=self.watch)  # fmt: skip
            finally:
                meter.close()
            self._modelled[model] = (watts, taken_at)
            return IdleBaseline(watts, "", seconds)
        meter = select_meter(
            run.device,
            None if energy.source == "auto" else energy.source,
            gpu_indices=devices,
            local_rank=0,
        )
        try:
            key = baseline_key(run.device, meter.source, devices, energy.idle_s)
            self._keys[id(spec)] = key
            return baseline(meter, key, energy.idle_s, energy.idle_max_age_s, self.cache,
                            clock=self.clock, watch=self.watch, phases=phases)  # fmt: skip
        finally:
            meter.close()

    def forget(self, spec: RunSpec) -> None:
        """``spec``'s run proved its baseline stale (its mean power below it): drop it, so
        the next configuration samples again."""
        key = self._keys.pop(id(spec), None)
        if key is not None:
            self.cache.forget(key)
