"""A fault-tolerant run's training loop: checkpoints every ``ckpt.every`` measured steps, an
injected failure (``fault.kill_rank``), and, after torchrun restarts the ranks, training again
from the last checkpoint, until ``train.steps`` measured steps are trained.

Unlike a window run (`greenbench.rank.worker.train_and_measure`), whose process lives through
its one window, a restarted run's ranks are new processes: what a rank measured before it died
must already be on disk. So every measured step, checkpoint and restart is metered on its own
and written to the rank's ledger as it ends (`greenbench.rank.ledger`); the rank that finishes
tells its result from its ledger, all attempts together: its tokens are each step's once, its
seconds run from the first measured step of the first attempt to its last step, its energy is
every segment it metered, redone steps, checkpoints and restarts included. Per-step metering
costs a meter read per step (on CPU two /proc/stat reads; on a GPU an NVML energy read), and a
device synchronisation.

The run trains exactly ``train.steps`` measured steps after ``train.warmup_steps`` unmeasured
ones (no window lengthening: the kill step and the checkpoints are counted in those steps). A
restarted rank with no checkpoint to load trains from initialisation again, its warm-up as part
of the restart. The injected failure fires in the first attempt only.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import torch

from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.device import DistContext, synchronize
from greenbench.rank import stamps
from greenbench.rank.checkpoint import (
    Checkpoints,
    check_writable,
    final_parameters,
    folder_bytes,
    step_folder,
)
from greenbench.rank.ledger import Ledger, combined_window, ledger_path, read_ledger, useful_steps
from greenbench.rank.phase import tell
from greenbench.rank.rank_meters import rank_meters
from greenbench.rank.state_memory import StateMemory
from greenbench.rank.training import make_optimizer, rank_result, settle_calls_of
from greenbench.rank.window import WindowTally
from greenbench.results import RankResult
from greenbench.settings.fault import NO_CHECKPOINTS, checkpoint_folder, kill_of
from greenbench.settings.runspec import RunSpec
from greenbench.sources.contract import TrainingWorkload
from greenbench.strategies import STRATEGIES


def attempt_number() -> int:
    """Which attempt this process is (0 first; torchrun counts its restarts)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))


def train_resilient(
    spec: RunSpec,
    ctx: DistContext,
    mesh: Any,
    comm: CommRecorder,
    workload: TrainingWorkload,
    out: Path,
) -> list[RankResult]:
    """Train ``spec``'s fault-tolerant run on this rank (module docstring); return its one
    result, told from its ledger."""
    config = spec.config
    train, ckpt = config.train, config.ckpt
    attempt = attempt_number()
    root = checkpoint_folder(ckpt.dir, out)
    every = ckpt.every
    if every != NO_CHECKPOINTS:
        check_writable(root)
    ledger = Ledger(ledger_path(out, ctx.rank))
    meters = rank_meters(
        spec, ctx.device.type, ctx.device.index or 0, ctx.local_rank, rank=ctx.rank
    )
    strategy = STRATEGIES[config.run.strategy].load()(ctx, mesh, comm, spec.layout)
    try:
        synchronize(ctx.device)
        t_begin = time.time()
        meters.begin()
        strategy.configure(config)
        model = strategy.parallelize(workload.model)
        model.train()
        optimizer = strategy.wrap_optimizer(
            make_optimizer(strategy.parameters(model), train.lr, ctx.device)
        )
        schedule = strategy.schedule(workload.loss)
        stamps.mark("ready")
        if ctx.rank == 0:  # now: a failure may end this process before the results are written
            stamps.write(out)
        checkpoints = Checkpoints(root, ctx, asynchronous=ckpt.mode == "async")
        start = resume_point(root, every, ctx)
        if start is None:
            tell("warm-up", steps=train.warmup_steps)
        for step in range(train.warmup_steps):  # a restart from a checkpoint needs none
            if start is None:
                schedule.train_step(
                    model, optimizer, strategy.assignment.batch(workload.batches, step)
                )
        load_s, t_load, load_window = 0.0, time.time(), None
        if start is not None:
            synchronize(ctx.device)
            window, _ = meters.end()
            meters.begin()
            tell("loading the checkpoint", step=start)
            t_load = time.time()
            checkpoints.load(start, strategy, model, optimizer)
            synchronize(ctx.device)
            load_s = time.time() - t_load
            load_window, _ = meters.end()
            meters.begin()
        synchronize(ctx.device)
        rest, _ = meters.end()
        comm.take()  # what building, warm-up and loading sent is not a measured step's
        if attempt > 0:
            parts = [w for w in (window if start is not None else None, load_window, rest) if w]
            loaded_bytes = {}  # rank 0 tells what the checkpoint holds
            if start is not None and ctx.rank == 0:
                loaded_bytes["loaded_bytes"] = folder_bytes(step_folder(root, start))
            ledger.write(
                "restart", attempt=attempt, t_begin=t_begin, t_ready=time.time(),
                loaded=start, load_s=load_s, t_load=t_load,
                load_energy=load_window.to_dict() if load_window else None,
                energy=sum_windows(parts), **loaded_bytes,
            )  # fmt: skip
        memory = StateMemory(model, optimizer, strategy.parameters(model))
        kill = kill_of(config) if attempt == 0 else None
        tell("training", steps=train.steps - (start or 0))
        for k in range(start or 0, train.steps):
            if kill == (ctx.rank, k):
                ledger.write("failure", attempt=attempt, step=k, rank=ctx.rank, t=time.time())
                os.kill(os.getpid(), signal.SIGKILL)
            batch = strategy.assignment.batch(workload.batches, train.warmup_steps + k)
            synchronize(ctx.device)
            t0 = time.time()
            meters.begin()
            with memory.saving():
                loss, times = schedule.train_step(model, optimizer, batch)
            synchronize(ctx.device)
            window, _ = meters.end()
            seconds = time.time() - t0
            calls = [[c.dim, c.op, c.nbytes, c.seconds, c.waits] for c in comm.take()]
            counted = strategy.counts_tokens
            share = strategy.flops_fraction
            causal = workload.flops.causal_of(batch)
            ledger.write(
                "step", attempt=attempt, step=k, t0=t0, seconds=seconds,
                energy=window.to_dict() if window else None,
                tokens=batch.n_tokens if counted else 0,
                useful_tokens=batch.n_tokens * share if counted else 0.0,
                flops=workload.flops.of(batch) * share if counted else 0.0,
                flops_causal=None if causal is None else (causal * share if counted else 0.0),
                loss_sum=loss if counted else 0.0, n_microbatches=len(batch.microbatches),
                compute_s=times.compute_s, comm_s=times.comm_s, wait_s=times.wait_s,
                calls=calls,
            )  # fmt: skip
            done = k + 1
            if every != NO_CHECKPOINTS and done % every == 0 and done < train.steps:
                tell("checkpoint", step=done)
                save(checkpoints, ledger, meters, ctx, attempt, done, strategy, model, optimizer)
                tell("training", steps=train.steps - done)
        finished = checkpoints.wait()
        if finished is not None and ctx.rank == 0:
            ledger.write(
                "written", attempt=attempt, step=finished,
                bytes=folder_bytes(step_folder(root, finished)),
            )  # fmt: skip
        if config.debug.save_final:
            final_parameters(strategy, model, optimizer, ctx, Path(config.debug.save_final))
        stamps.mark("trained")
        ledger.write("end", attempt=attempt, t=time.time())
        ledger.close()
        return [told(ctx, read_ledger(ledger_path(out, ctx.rank)), memory)]
    finally:
        meters.close()
        strategy.close()


def resume_point(root: Path, every: int, ctx: DistContext) -> int | None:
    """The measured steps of the checkpoint every rank resumes from (None: from scratch): the
    newest complete one, agreed by the ranks (the lowest any sees)."""
    from greenbench.rank.checkpoint import latest_complete

    if every == NO_CHECKPOINTS:
        return None
    found = latest_complete(root)
    if not ctx.distributed:
        return found
    import torch.distributed as dist

    t = torch.tensor([-1 if found is None else found], dtype=torch.int64)
    if ctx.device.type == "cuda":
        t = t.to(ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    agreed = int(t.item())
    return None if agreed < 0 else agreed


def save(
    checkpoints: Checkpoints,
    ledger: Ledger,
    meters: Any,
    ctx: DistContext,
    attempt: int,
    steps: int,
    strategy: Any,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
) -> None:
    """One checkpoint, metered: the seconds and joules training waits for it (an asynchronous
    save: the copy to memory; its write is waited for by the next save or the run's end)."""
    synchronize(ctx.device)
    t0 = time.time()
    meters.begin()
    previous = checkpoints.wait()
    checkpoints.save(steps, strategy, model, optimizer)
    synchronize(ctx.device)
    window, _ = meters.end()
    ledger.write(
        "checkpoint", attempt=attempt, step=steps, t0=t0, seconds=time.time() - t0,
        energy=window.to_dict() if window else None,
        mode="async" if checkpoints.asynchronous else "sync",
    )  # fmt: skip
    if ctx.rank != 0:
        return
    for done in (previous, None if checkpoints.asynchronous else steps):
        if done is not None:
            ledger.write(
                "written", attempt=attempt, step=done,
                bytes=folder_bytes(step_folder(checkpoints.root, done)),
            )  # fmt: skip


def sum_windows(windows: list[Any]) -> dict[str, Any] | None:
    """Several consecutive meter windows as one (a dict as the ledger keeps windows)."""
    from greenbench.rank.ledger import joules

    dicts = [w.to_dict() for w in windows]
    if not dicts:
        return None
    first = dict(dicts[0])
    first["seconds"] = sum(d["seconds"] for d in dicts)
    for part in ("energy_j", "energy_gpu_j", "energy_cpu_j", "energy_dram_j"):
        first[part] = joules(dicts, part)
    first["measured"] = all(d["measured"] for d in dicts)
    first["samples"] = []
    first["note"] = "; ".join(sorted({d["note"] for d in dicts} - {""}))
    return first


def told(ctx: DistContext, records: list[dict[str, Any]], memory: StateMemory) -> RankResult:
    """This rank's result from its ledger, all attempts together (module docstring)."""
    kept, _ = useful_steps(records)
    tally = WindowTally()
    calls: list[tuple[str, str, int, float, bool]] = []
    for r in kept:
        tally.step_times_s.append(r["seconds"])
        tally.compute_s += r["compute_s"]
        tally.comm_s += r["comm_s"]
        tally.wait_s += r["wait_s"]
        tally.loss_sum += r["loss_sum"]
        tally.tokens += r["tokens"]
        tally.useful_tokens += r["useful_tokens"]
        tally.flops += r["flops"]
        if tally.flops_causal is not None and r["flops_causal"] is not None:
            tally.flops_causal += r["flops_causal"]
        else:
            tally.flops_causal = None
        tally.n_microbatches += r["n_microbatches"]
        calls += [tuple(c) for c in r["calls"]]  # type: ignore[misc]
    records_ = settle_calls_of(tally, calls, ctx)
    steps = [r for r in records if r["kind"] == "step"]
    first = min(r["t0"] for r in steps if r["attempt"] == min(s["attempt"] for s in steps))
    last = max(r["t0"] + r["seconds"] for r in kept)
    seconds = last - first
    window = combined_window(records, seconds)
    return rank_result(ctx, 0, tally, seconds, window, tuple(records_), (), memory.read())
