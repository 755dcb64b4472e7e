"""Runs RunSpecs, each by the runner chosen for it once (`greenbench.launcher.runners`), and
stores what each returns: its run record when it begins, its outcome when it ends.

The launcher is the only writer of the database. For each configuration it inserts the
`running` row its runner records, runs it and finishes the row in one short transaction. It
reads every block of the database before the first configuration runs (a damaged file is
refused), and a finished run whose write cannot get the database's lock (another process holds
it past ``$GREENBENCH_LOCK_WAIT_S``) goes to a result shard beside it, merged by the next run or
`greenbench merge`: a measurement is never lost to a lock. A failing configuration is stored as
`failed` (with the rank and its error) and the suite goes on; Ctrl-C marks the current one
`interrupted`, keeps the rest and re-raises.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenbench.errors import DoesNotFit, GreenbenchError
from greenbench.launcher.durations import session_costs
from greenbench.launcher.execute import sweep_stale_temp
from greenbench.launcher.phases import NO_PHASES, Phases
from greenbench.launcher.power_limits import LimitPlan, plan_limits
from greenbench.launcher.preflight import (
    check_energy_sources,
    check_node_meters,
    nothing_can_run,
)
from greenbench.launcher.resolve import resolve_spec
from greenbench.launcher.runners import Peak, RunContext, Runners
from greenbench.processes import stop_handler
from greenbench.results import RunOutcome
from greenbench.settings import spec_key
from greenbench.settings.runspec import RunSpec

if TYPE_CHECKING:
    from greenbench.store import Store
    from greenbench.store.shard_writer import ShardStore

#: what `run_specs` tells its caller as it goes: (event, configuration, details)
OnEvent = Callable[[str, RunSpec | None, dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How `run_specs` runs a suite (its docstring says what each does)."""

    rdzv: dict[str, Any] | None = None  # a multi-node run's rendezvous: endpoint, node_rank
    resume: bool = False
    force: bool = False
    devices: int | None = None
    run_ids: list[str] | None = None
    to_shards: bool = False


@dataclass(slots=True)
class RunSummary:
    """What happened to each configuration of one `greenbench run`."""

    run_ids: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)

    @property
    def failed(self) -> int:
        """Configurations that ran and did not finish ok (skipped ones did not run)."""
        return sum(s not in ("ok", "skipped") for s in self.statuses)

    def add(self, spec: RunSpec, run_id: str, status: str, error: str | None) -> None:
        """One configuration's end."""
        self.run_ids.append(run_id)
        self.statuses.append(status)
        self.names.append(spec.name)
        self.errors.append(error)


def run_names(specs: Sequence[RunSpec]) -> Callable[[RunSpec], str]:
    """How progress and the dry run name a spec's run: its configuration's name, and its seed
    where the specs run several (``greenbench run --seeds``), for a configuration's name does
    not hold it."""
    from greenbench.settings import SEED_KEY

    def seed(spec: RunSpec) -> object:
        return getattr(spec, "settings", {}).get(SEED_KEY)

    if len({seed(spec) for spec in specs}) <= 1:
        return lambda spec: spec.name
    return lambda spec: f"{spec.name} seed={seed(spec)}"


def run_specs(
    specs: list[RunSpec],
    db_path: Path,
    options: RunOptions | None = None,
    *,
    on_event: OnEvent | None = None,
    phases: Phases | None = None,
) -> RunSummary:
    """Run every spec, storing each as it finishes. ``on_event`` drives progress display: it
    hears each configuration's start and end, notes, waits for the database's lock, and, once
    before the first configuration, the ``plan`` (the resolved specs, whether each runs, their
    peaks); ``phases`` is told what the launcher and the ranks are doing
    (`greenbench.launcher.phases`).

    With ``resume``, configurations that already have an ``ok`` run with the same identity and
    label in the database are skipped (reported as ``skipped``), so an interrupted suite can be
    finished without repeating what was stored.

    Before anything is stored, forced energy sources are checked, and every configuration is
    checked against this machine by its runner (``force`` skips the latter): its ranks need a
    device each (the visible GPUs, at most ``devices``; on CPU, ``devices`` ranks when given)
    and its estimated memory and time must fit (`greenbench.launcher.preflight`). One
    configuration that cannot is refused (DoesNotFit, exit 2, nothing written), and so is a
    suite none of whose configurations can; otherwise it is stored ``skipped`` with the reason
    and the others run.

    A cluster job (`greenbench.cluster`) passes the ``run_ids`` its submitter chose, one per
    spec, and ``to_shards``: every run then goes to a result shard of its own
    (`greenbench.store.shard_writer`), the database is never opened, and a configuration that
    cannot fit the node is stored ``skipped`` rather than refused, since nobody is there to
    read a refusal.
    """
    from greenbench.energy.carbon import carbon_intensity_g_per_kwh
    from greenbench.hardware.fingerprint import fingerprint as machine_fingerprint
    from greenbench.launcher.cpu_quota import sweep_stale
    from greenbench.rank.stamps import process_started_at
    from greenbench.store import new_run_id

    opts = options or RunOptions()
    emit: OnEvent = on_event or (lambda *_: None)
    turn_began = process_started_at() or time.time()  # the first run's start-up: all of ours
    specs = [resolve_spec(sp) for sp in specs]
    sweep_stale()  # quota groups a killed launcher left behind
    sweep_stale_temp()  # and its working folders
    check_energy_sources(specs)
    check_node_meters(specs)
    specs, limits = plan_limits(specs)  # refused here (exit 2) when a limit cannot be set
    for i, plan in limits.items():  # a limit moved into the allowed range: say so now
        if plan.note:
            emit("note", specs[i], {"message": f"{specs[i].name}: {plan.note}"})
    runners = Runners()
    if opts.rdzv and opts.rdzv.get("node_rank"):
        return follow_specs(specs, opts.rdzv, emit, runners, limits)
    chosen = [runners.for_spec(spec) for spec in specs]  # each configuration's, once
    told = phases or NO_PHASES
    if session_costs(specs):  # a peak this machine's cache lacks is measured now
        told.tell("calibrating the CPU peak (once per machine)")
    peaks = [runner.peak(spec) for runner, spec in zip(chosen, specs, strict=True)]
    told.tell(None)
    refused = {} if opts.force else {
        i: why
        for i, (runner, spec, peak) in enumerate(zip(chosen, specs, peaks, strict=True))
        if (why := runner.why_not_here(spec, peak, opts.devices)) is not None
    }  # fmt: skip
    if len(specs) == 1 and refused and not opts.to_shards:
        raise DoesNotFit(f"{specs[0].name} {refused[0]} (--force runs it anyway)")
    if refused and len(refused) == len(specs) and not opts.to_shards:
        raise DoesNotFit(nothing_can_run(list(refused.values())))
    now: dict[str, Any] = {}  # the configuration a wait for the database's lock is for
    store = open_store(db_path, opts.to_shards, emit, now)
    fingerprint = machine_fingerprint()
    summary = RunSummary()
    done = finished_configs(db_path) if opts.resume else set()
    if specs:
        runs = [i not in refused and (spec_key(sp), sp.label) not in done
                for i, sp in enumerate(specs)]  # fmt: skip
        emit("plan", None, {"specs": specs, "runs": runs, "peaks": [p.flops for p in peaks]})
    for i, (runner, spec) in enumerate(zip(chosen, specs, strict=True)):
        if (spec_key(spec), spec.label) in done:
            emit("skip", spec, {})
            continue
        run_id = opts.run_ids[i] if opts.run_ids else new_run_id()
        carbon = carbon_intensity_g_per_kwh(spec.config.energy.region)
        ctx = RunContext(
            run_id, fingerprint, carbon, peaks[i], limit=limits.get(i), rdzv=opts.rdzv,
            logs_dir=logs_dir_for(db_path) / run_id, began_at=turn_began, phases=told,
        )  # fmt: skip
        if i in refused:
            reason = f"cannot fit this machine: {refused[i]} (--force runs it anyway)"
            store.begin_run(runner.record(spec, ctx).row())
            store.mark_run(run_id, "skipped", reason)
            summary.add(spec, run_id, "skipped", reason)
            emit("end", spec, {"run_id": run_id, "status": "skipped", "error": reason})
            continue
        now["spec"] = spec
        if not store.begin_run(runner.record(spec, ctx).row()):
            emit("note", spec, {"message": f"{db_path} is locked by another process: run "
                                f"{run_id} goes ahead and is stored when it finishes"})  # fmt: skip
        emit("start", spec, {"run_id": run_id})
        try:
            outcome = runner.run(spec, ctx)
        except KeyboardInterrupt:
            store.mark_run(run_id, "interrupted", "interrupted by the user (SIGINT/SIGTERM)")
            emit("end", spec, {"run_id": run_id, "status": "interrupted"})
            raise
        except GreenbenchError as exc:
            outcome = RunOutcome(status="failed", error=str(exc))
        finally:
            told.tell(None)
        if outcome.contended:
            emit("note", spec, {"message": f"{run_id}: {outcome.warnings[-1]}"})
        shard = store.finish_run(run_id, outcome)
        if shard is not None:
            emit("note", spec, {"message": stored_in_shard(db_path, run_id, shard)})
        summary.add(spec, run_id, outcome.status, outcome.error)
        emit(
            "end",
            spec,
            {"run_id": run_id, "status": outcome.status, "error": outcome.error,
             "repeats": outcome.repeats, "contended": outcome.contended,
             "others_busy_cores": outcome.others_busy_cores,
             "other_greenbench": outcome.other_greenbench},
        )  # fmt: skip
        turn_began = time.time()  # the next configuration's turn
    return summary


def open_store(
    db_path: Path, to_shards: bool, emit: OnEvent, now: dict[str, Any]
) -> Store | ShardStore:
    """Where this session's runs go: a result shard each (``to_shards``), or the database,
    validated and read block by block before any run starts, with the shards an earlier run
    (or a cluster job) left merged now, one transaction each."""
    from greenbench.store import Store, merge_pending
    from greenbench.store.shard_writer import ShardStore

    if to_shards:
        return ShardStore(db_path)
    store = Store(
        db_path,
        write_wait_s=lock_wait_s(),
        verify=True,
        on_wait=lambda waited: emit("wait", now.get("spec"), {"waited_s": waited}),
    )
    for line in merge_pending(store, timeout_s=store.lock_timeout_s).lines():
        emit("note", None, {"message": line})
    return store


def logs_dir_for(db_path: Path) -> Path:
    """Where the worker logs of failed (or warned) runs are kept: ``<db stem>-logs/<run id>/``
    beside the database, so `greenbench show` can point to them."""
    db_path = Path(db_path)
    return db_path.absolute().parent / f"{db_path.stem}-logs"


def lock_wait_s() -> float:
    """How long a finished run's write waits for a database another process holds before the
    run goes to a shard: ``$GREENBENCH_LOCK_WAIT_S`` seconds, 60 by default."""
    from greenbench.errors import StoreError

    text = os.environ.get("GREENBENCH_LOCK_WAIT_S", "60")
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise StoreError(f"GREENBENCH_LOCK_WAIT_S must be a number of seconds ≥ 0, got {text!r}")
    return value


def stored_in_shard(db_path: Path, run_id: str, shard: Path) -> str:
    """The line that tells a user where a run went when the database would not take it."""
    return (
        f"{db_path} stayed locked by another process: run {run_id} was stored in {shard}; "
        "the next `greenbench run` or `greenbench merge` folds it into the database"
    )


def follow_specs(
    specs: list[RunSpec],
    rdzv: dict[str, Any],
    emit: OnEvent,
    runners: Runners,
    limits: dict[int, LimitPlan] | None = None,
) -> RunSummary:
    """A node other than node 0 of a multi-node run: start this node's ranks for every spec and
    store nothing. Global rank 0 (on node 0) gathers every rank's results, and node 0's launcher
    writes them, so the database has one writer however many nodes take part. Each node holds
    its own GPUs' power limit (``limits``) around its ranks; a configuration that starts no
    ranks (a simulation) is node 0's alone."""
    summary = RunSummary()
    for i, spec in enumerate(specs):
        runner = runners.for_spec(spec)
        if not runner.shape(spec).launches_ranks:
            continue
        emit("start", spec, {"run_id": f"node {rdzv['node_rank']}"})
        status, error = "ok", None
        unmeasured = Peak(None, None, "")  # node 0 aggregates and stores: no peak needed here
        ctx = RunContext("", {}, (0.0, ""), unmeasured, (limits or {}).get(i), rdzv)
        try:
            runner.follow(spec, ctx)
        except KeyboardInterrupt:
            emit("end", spec, {"run_id": "", "status": "interrupted"})
            raise
        except GreenbenchError as exc:
            status, error = "failed", str(exc)
        summary.add(spec, "", status, error)
        emit("end", spec, {"run_id": "", "status": status, "error": error, "repeats": []})
    return summary


def finished_configs(db_path: Path) -> set[tuple[str, str | None]]:
    """(config_key, label) of every run stored with status ok."""
    from greenbench.store import read_frame, views

    if not Path(db_path).exists():
        return set()
    frame = read_frame(db_path, views.FINISHED_CONFIGS)
    return {
        (r.config_key, None if r.label is None or r.label != r.label else r.label)
        for r in frame.itertuples()
    }


def install_interrupt_handlers() -> None:
    """SIGINT and SIGTERM both raise KeyboardInterrupt, so the current run is marked interrupted
    (remembered, so that a stop landing while a rank is being started is not lost:
    `greenbench.processes.stop_handler`).

    SIGINT is set explicitly: a process started in the background by a non-interactive shell
    (``cmd &`` in a script, many CI runners) inherits SIGINT *ignored*, and Python then leaves it
    ignored, so ``kill -INT`` would do nothing."""

    signal.signal(signal.SIGINT, stop_handler)
    signal.signal(signal.SIGTERM, stop_handler)
