"""Per-rank entry point: build, warm up, measure, report.

Runs as ``python -m greenbench.rank.worker``, alone for one rank or under torchrun for
several. A worker never writes the database: it returns its RankResults (gathered on rank 0,
which writes them to a JSON file the launcher reads).

The measured window of each repeat is ``meter.begin()`` … steps … ``meter.end()``, with the
device synchronised at both ends. Inside it, the only extra work per step is two clock reads,
one arithmetic FLOP count from batch shapes and the saved-tensor hook that counts activation
bytes (`greenbench.rank.state_memory`: one Python call per tensor autograd saves; the
parameters, gradients and optimizer state are counted after the window); the number of steps
per window is agreed once after warm-up (not decided per step, which would need a collective
per step).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.device import DistContext, synchronize
from greenbench.processes import die_with_parent, exit_now
from greenbench.rank import emulated_gpu, stamps
from greenbench.rank.faults import Faults
from greenbench.rank.hangs import dump_stacks_on_request
from greenbench.rank.phase import open_phases, tell
from greenbench.rank.rank_meters import rank_meters
from greenbench.rank.state_memory import StateMemory
from greenbench.rank.training import (
    flag_short,
    make_optimizer,
    rank_result,
    reset_peak_memory,
    settle_communication,
    whole_periods,
)
from greenbench.rank.window import WindowTally
from greenbench.results import RankResult
from greenbench.settings.run import TrainSettings
from greenbench.settings.runspec import RunSpec
from greenbench.sources.contract import TrainingWorkload
from greenbench.strategies import STRATEGIES
from greenbench.strategies.base import Strategy


def dist_context(device: str, precision: str) -> DistContext:
    """Read torchrun's environment (defaults: one rank) and pick this rank's device."""
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    return DistContext(rank=rank, local_rank=local_rank, world_size=world, device=dev, dtype=dtype)


def run_rank(spec: RunSpec, out: Path | None = None) -> list[RankResult]:
    """Train this rank for warm-up plus ``repeats`` measured windows; return one result each.
    A fault-tolerant run (checkpoints, an injected failure) trains through
    `greenbench.rank.resilient`, its ledger and checkpoints in the run's working folder
    ``out``."""
    from greenbench.rank.mesh import build_mesh
    from greenbench.rank.workload import rank_workload
    from greenbench.settings.fault import fault_tolerant

    run = spec.config.run
    ctx = dist_context(run.device, run.precision)
    layout = spec.layout
    workload = rank_workload(spec, ctx.device)  # the model, batches, loss and FLOPs it trains
    mesh = build_mesh(layout, ctx.device.type) if ctx.distributed else None
    comm = CommRecorder(ctx.device)
    if spec.config.train.until == "target":
        return runs_to_target(spec, ctx, mesh, comm, workload)
    if fault_tolerant(spec.config):
        from greenbench.rank.resilient import train_resilient

        if out is None:
            raise ValueError("a fault-tolerant run needs its working folder (out)")
        return train_resilient(spec, ctx, mesh, comm, workload, out)
    strategy = STRATEGIES[run.strategy].load()(ctx, mesh, comm, layout)
    strategy.configure(spec.config)
    model = strategy.parallelize(workload.model)
    try:
        return train_and_measure(spec, ctx, strategy, model, comm, workload)
    finally:
        strategy.close()


def runs_to_target(
    spec: RunSpec,
    ctx: DistContext,
    mesh: Any,
    comm: CommRecorder,
    workload: TrainingWorkload,
) -> list[RankResult]:
    """``run.repeats`` runs to the target loss, each from a freshly built and initialised model
    (`greenbench.rank.to_target`)."""
    from greenbench.rank.to_target import train_to_target
    from greenbench.settings.target import resolved_target

    config = spec.config
    target = resolved_target(config)
    tell("warm-up", steps=config.train.warmup_steps)
    prime(spec, ctx, mesh, comm, workload)
    results = []
    for repeat in range(config.run.repeats):
        tell("repeat", index=repeat + 1, of=config.run.repeats)
        strategy = STRATEGIES[config.run.strategy].load()(ctx, mesh, comm, spec.layout)
        strategy.configure(config)
        model = strategy.parallelize(workload.model)
        try:
            stamps.mark("ready")  # no warm-up: the first step is the first repeat's
            results.append(
                train_to_target(spec, ctx, strategy, model, comm, workload, repeat, target)
            )
        finally:
            strategy.close()
        del model, strategy
    stamps.mark("trained")
    return results


def prime(
    spec: RunSpec,
    ctx: DistContext,
    mesh: Any,
    comm: CommRecorder,
    workload: TrainingWorkload,
) -> None:
    """Pay the process's one-time costs before the first run to a target: ``train.warmup_steps``
    steps and one evaluation of a throwaway model, unmeasured, then discarded. Each repeat
    trains a fresh model from initialisation, but the first would otherwise also be charged for
    creating the device's context, choosing kernels, growing the allocator and compiling (on an
    H200 the first of three repeats took 6.5 s to the target, the others 0.8 s)."""
    config = spec.config
    if config.train.warmup_steps < 1:
        return
    strategy = STRATEGIES[config.run.strategy].load()(ctx, mesh, comm, spec.layout)
    strategy.configure(config)
    model = strategy.parallelize(workload.model)
    try:
        model.train()
        optimizer = strategy.wrap_optimizer(
            make_optimizer(strategy.parameters(model), config.train.lr, ctx.device)
        )
        schedule = strategy.schedule(workload.loss)
        stamps.mark("ready")
        # whole periods: a method that synchronises every few steps does so here too
        for step in range(whole_periods(config.train.warmup_steps, strategy.period)):
            schedule.train_step(model, optimizer, strategy.assignment.batch(workload.batches, step))
            stamps.mark("first_step")
        if workload.held_out is not None:
            schedule.evaluate(model, strategy.assignment.batch(workload.held_out, 0))
        synchronize(ctx.device)
        comm.take()
    finally:
        strategy.close()
    del model, strategy


def train_and_measure(
    spec: RunSpec,
    ctx: DistContext,
    strategy: Strategy,
    model: torch.nn.Module,
    comm: CommRecorder,
    workload: TrainingWorkload,
) -> list[RankResult]:
    """Warm up, agree on the window's steps, then measure ``repeats`` windows. The strategy's
    assignment picks each step's batch from the workload's batch source, its schedule trains
    it with the workload's loss; the workload's FLOPs give each step's (counted over the first
    warm-up step where they must be counted)."""
    config = spec.config
    train, debug = config.train, config.debug
    model.train()
    optimizer = strategy.wrap_optimizer(
        make_optimizer(strategy.parameters(model), train.lr, ctx.device)
    )
    schedule = strategy.schedule(workload.loss)
    assignment, batches, flops = strategy.assignment, workload.batches, workload.flops
    faults = Faults(
        debug.fail_rank, debug.hang_rank, debug.kill_rank, debug.oom_rank,
        at_microbatch=debug.fault_microbatch,
    )  # fmt: skip
    emulated = bool(emulated_gpu.emulated(spec))

    step = 0
    warm_times, warm_flops = [], []
    stamps.mark("ready")
    # whole periods: the first window starts where the replicas agree (Strategy.period)
    n_warm = whole_periods(warmup_steps(train), strategy.period)
    tell("warm-up", steps=n_warm)
    for _ in range(n_warm):
        t0 = time.perf_counter()
        batch = assignment.batch(batches, step)
        with flops.counting(batch) if step == 0 else contextlib.nullcontext():
            schedule.train_step(model, optimizer, batch)
        warm_times.append(time.perf_counter() - t0)
        stamps.mark("first_step")
        if emulated:  # an emulated GPU's base step is a FLOP rate
            warm_flops.append(flops.of(batch) * strategy.flops_fraction)
        step += 1

    # the rank's own meter, the node's beside it, an emulated GPU (rank_meters)
    meters = rank_meters(
        spec, ctx.device.type, ctx.device.index or 0, ctx.local_rank, rank=ctx.rank
    )
    device = meters.emulated  # its steps take its model's time (greenbench.rank.emulated_gpu)
    if device is not None:
        settled = slice(1, None) if len(warm_times) > 1 else slice(None)
        for t, f in zip(warm_times[settled], warm_flops[settled], strict=True):
            device.observe(t, f)
        modelled = device.step_s(0.0, min(warm_flops[settled], default=0.0))
        warm_times = warm_times if modelled is None else [modelled, modelled]
    n_steps = steps_per_window(train, warm_times, ctx, strategy.period)
    memory = StateMemory(model, optimizer, strategy.parameters(model))
    results = []
    try:
        for repeat in range(config.run.repeats):
            tell("repeat", index=repeat + 1, of=config.run.repeats, steps=n_steps)
            window_batches = [assignment.batch(batches, step + i) for i in range(n_steps)]
            step += n_steps
            comm.take()  # drop what warm-up and earlier windows recorded
            reset_peak_memory(ctx.device)
            memory.reset()
            tally = WindowTally()
            # an emulated GPU's steps: real seconds, debug.slowdown_s, FLOPs
            real_s, extra_s, flops_s = [], [], []
            synchronize(ctx.device)
            meters.begin()
            window_start = time.perf_counter()
            for i, batch in enumerate(window_batches):
                t0 = time.perf_counter()
                hook = faults.arm(ctx.rank) if i == 0 and repeat == 0 else None
                with memory.saving():
                    loss, times = schedule.train_step(model, optimizer, batch, hook)
                trained_s, burned_s = time.perf_counter() - t0, 0.0
                if debug.slowdown_s:
                    burned_s = burn(debug.slowdown_s, ctx.device)
                    times.compute_s += burned_s
                if device is not None:  # the model's time, settled after the window
                    real_s.append(trained_s)
                    extra_s.append(burned_s)
                    flops_s.append(flops.of(batch) * strategy.flops_fraction)
                    device.pace(t0, burned_s, flops_s[-1])
                causal = flops.causal_of(batch)
                tally.add(
                    time.perf_counter() - t0,
                    times,
                    loss,
                    batch,
                    flops.of(batch) * strategy.flops_fraction,
                    None if causal is None else causal * strategy.flops_fraction,
                    counted=strategy.counts_tokens,
                    share=strategy.flops_fraction,
                )
            synchronize(ctx.device)
            seconds = time.perf_counter() - window_start
            if device is not None:
                tally.step_times_s = device.settle(real_s, extra_s, flops_s)
                seconds = math.fsum(tally.step_times_s)
            window, beside = meters.end()
            records = settle_communication(tally, comm, ctx)
            if device is not None:
                real = math.fsum(real_s) + math.fsum(extra_s)
                tally.compute_s, tally.comm_s, tally.wait_s = emulated_gpu.split(
                    real, tally.comm_s, tally.wait_s, seconds
                )
                if window is not None:
                    note = "; ".join(filter(None, (window.note, device.note())))
                    window = replace(window, seconds=seconds, note=note)
            state = memory.read()
            if window is not None and seconds < train.min_window_s:
                window = flag_short(window, seconds, train.min_window_s)
            results.append(
                rank_result(ctx, repeat, tally, seconds, window, tuple(records), beside, state)
            )
        stamps.mark("trained")
    finally:
        meters.close()
    return results


def warmup_steps(train: TrainSettings) -> int:
    """The unmeasured steps before the first window: ``train.warmup_steps``, and one more where
    there is only one and the window must be lengthened to ``train.min_window_s``: the first
    step pays for allocation, autotuning and compilation (seconds on a GPU), so the window's
    length is judged from a step after it (`steps_per_window`)."""
    calibrate = train.warmup_steps == 1 and train.min_window_s > 0
    return train.warmup_steps + int(calibrate)


def steps_per_window(
    train: TrainSettings, warm_times: list[float], ctx: DistContext, period: int = 1
) -> int:
    """Enough steps for a window of at least ``train.min_window_s``, agreed by every rank, in
    whole periods of ``period`` steps (`Strategy.period`: a window of a method that synchronises
    every ``period`` steps ends where its replicas agree; ``train.max_steps`` is then exceeded by
    less than a period where it is not a multiple of one)."""
    n = train.steps
    if warm_times:
        # the first step also pays for allocation, autotuning and compilation: judge by the rest
        settled = warm_times[1:] or warm_times
        typical = sorted(settled)[len(settled) // 2]
        n = max(n, math.ceil(train.min_window_s * 1.1 / max(typical, 1e-6)))
    n = min(n, train.max_steps)
    if ctx.distributed:
        import torch.distributed as dist

        t = torch.tensor([n], dtype=torch.int64)
        if ctx.device.type == "cuda":
            t = t.to(ctx.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        n = int(t.item())
    return whole_periods(n, period)


def burn(seconds: float, device: torch.device) -> float:
    """A deliberate regression (debug.slowdown_s): extra matrix products on the training device
    for ``seconds``, so the slower step also costs more energy, as a real regression does (a
    sleep would lower the load and, under a load-based power model, the joules). Returns the
    seconds spent."""
    a = torch.randn(256, 256, device=device)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        a = torch.tanh(a @ a)
        synchronize(device)
    return time.perf_counter() - start


def gather(results: list[RankResult], ctx: DistContext) -> list[RankResult] | None:
    """Collect every rank's results on rank 0 (None elsewhere)."""
    if not ctx.distributed:
        return results
    import torch.distributed as dist

    payload = [r.to_dict() for r in results]
    # the current group's ranks: a SkipPipe run's survivors regroup when a node is killed
    # (their rank 0 is still the data node, rank 0)
    rank, world = dist.get_rank(), dist.get_world_size()
    out: list | None = [None] * world if rank == 0 else None
    dist.gather_object(payload, out, dst=0)
    if rank != 0:
        return None
    return [RankResult.from_dict(d) for part in out for d in part]


def main(argv: list[str] | None = None) -> int:
    """torchrun entry: ``python -m greenbench.rank.worker --spec spec.json --out DIR``.

    Returns the exit code; ``python -m greenbench.rank.worker`` then ends the process with
    `exit_now`, never through interpreter finalization (see there)."""
    stamps.mark("imported")  # the interpreter and this module's imports are done
    parser = argparse.ArgumentParser(prog="greenbench.rank.worker")
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    spec = RunSpec.from_dict(json.loads(args.spec.read_text()))
    rank = int(os.environ.get("RANK", 0))
    die_with_parent()
    join_quota(args.out, rank)
    dump_stacks_on_request(args.out, rank)  # the launcher asks when the run times out
    try:
        import torch.distributed as dist

        config = spec.config
        distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
        if distributed:
            backend = "nccl" if config.run.device == "cuda" else "gloo"
            init_process_group(backend)
        ctx = dist_context(config.run.device, config.run.precision)
        open_phases(args.out, rank)
        tell("building the model")
        results = run_rank(spec, args.out)
        tell("gathering results")
        gathered = gather(results, ctx)
        if gathered is not None:
            stamps.write(args.out)  # before the results: the launcher reads both once they are
            tmp = args.out / "results.json.tmp"
            tmp.write_text(json.dumps([r.to_dict() for r in gathered]))
            tmp.replace(args.out / "results.json")
        if distributed:
            # nobody leaves before rank 0 has the results on disk: whatever happens to a rank
            # after this barrier, the gathered measurement is kept (the launcher reads it)
            dist.barrier()
            dist.destroy_process_group()
        if config.debug.abort_at_exit_rank == rank:
            os.abort()  # test hook: a native crash at exit, after the results were written
    except BaseException as exc:
        error = {
            "rank": rank,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
            "time": time.time(),
            # torchrun's restarts run the ranks again: a later attempt's error is the run's
            "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
        }
        (args.out / f"error-rank{rank}.json").write_text(json.dumps(error))
        print(f"{error['traceback']}[rank {rank}] {error['error']}", file=sys.stderr)
        return 1
    return 0


def init_process_group(backend: str) -> None:
    """Join the run's default process group from torchrun's environment. Ranks that torchrun
    restarted (``TORCHELASTIC_RESTART_COUNT`` > 0) meet under a prefix of their attempt on the
    launcher's store: the store outlives the ranks that died, and the addresses they left in it
    would otherwise be read back by the new ranks, which then connect to ports nobody listens
    on."""
    import datetime

    import torch.distributed as dist

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    if attempt == 0:
        dist.init_process_group(backend=backend)
        return
    timeout = datetime.timedelta(minutes=10)
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timeout,
    )
    dist.init_process_group(
        backend=backend,
        store=dist.PrefixStore(f"greenbench/attempt-{attempt}", store),
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timeout,
    )


def join_quota(out: Path, rank: int) -> None:
    """Move this rank into its CPU-quota group when the launcher made one; a rank that cannot
    leaves a warning the launcher stores with the run."""
    from greenbench.rank.cpu_group import join_rank_group

    problem = join_rank_group(int(os.environ.get("LOCAL_RANK", 0)))
    if problem:
        (out / f"warning-rank{rank}.txt").write_text(
            f"rank {rank} ran without its CPU quota: {problem}"
        )


if __name__ == "__main__":
    exit_now(main())
