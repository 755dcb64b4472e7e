"""A run to a target loss on one rank (``train.until = target``): train from initialisation,
evaluate the whole model on the held-out set every ``eval.every`` steps, stop when the
validation loss reaches the target or a budget (steps, tokens, seconds, joules) runs out.

Time and energy are measured as in a window run, but in segments: each stretch of training
between two evaluations is one meter window, and the run's training is the sum of its segments.
Each evaluation is a window of its own, so its seconds and joules are measured too and kept out
of the training figures (`TargetOutcome.eval_s`, ``eval_energy_j``). Every step counts, the
first included: reaching a loss costs what it costs from initialisation (``train.warmup_steps``
trains a throwaway model first, so the process's one-time costs are not charged to the first
repeat: `greenbench.rank.worker.prime`). The decision to stop is the same on every rank: the
validation loss is reduced over the ranks, and the seconds and joules spent are agreed (the
longest rank's seconds, the ranks' summed joules) at each evaluation, outside the windows.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field, replace

import torch

from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.device import DistContext, synchronize
from greenbench.energy.base import EnergyWindow, PowerSample
from greenbench.rank.faults import Faults
from greenbench.rank.phase import tell
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
from greenbench.results import CommRecord, RankResult, TargetOutcome, ValPoint
from greenbench.settings.runspec import RunSpec
from greenbench.sources.contract import TrainingWorkload
from greenbench.strategies.base import Strategy


@dataclass(slots=True)
class RunTally:
    """The training segments of one run to a target, added up: the window tally's sums, the
    communication records merged by (dimension, operation), and the segments' energy."""

    tally: WindowTally = field(default_factory=WindowTally)
    comm: dict[tuple[str, str], CommRecord] = field(default_factory=dict)
    comm_notes: list[str] = field(default_factory=list)
    windows: list[EnergyWindow] = field(default_factory=list)
    beside: list[list[EnergyWindow]] = field(default_factory=list)

    def absorb(
        self,
        segment: WindowTally,
        records: list[CommRecord],
        window: EnergyWindow | None,
        beside: tuple[EnergyWindow, ...],
    ) -> None:
        """Add one settled segment (`greenbench.rank.training.settle_communication` has split
        its communication) and the meters' windows over it."""
        t = self.tally
        t.step_times_s.extend(segment.step_times_s)
        t.compute_s += segment.compute_s
        t.comm_s += segment.comm_s
        t.wait_s += segment.wait_s
        t.loss_sum += segment.loss_sum
        t.tokens += segment.tokens
        t.flops += segment.flops
        t.flops_causal = (
            None
            if t.flops_causal is None or segment.flops_causal is None
            else t.flops_causal + segment.flops_causal
        )
        t.n_microbatches += segment.n_microbatches
        t.useful_tokens += segment.useful_tokens
        if segment.comm_note and segment.comm_note not in self.comm_notes:
            self.comm_notes.append(segment.comm_note)
        for r in records:
            old = self.comm.get((r.dim, r.op))
            self.comm[(r.dim, r.op)] = r if old is None else CommRecord(
                r.dim, r.op, old.calls + r.calls, old.bytes + r.bytes,
                old.seconds + r.seconds, old.wait_s + r.wait_s,
            )  # fmt: skip
        if window is not None:
            self.windows.append(window)
        for i, w in enumerate(beside):
            if i == len(self.beside):
                self.beside.append([])
            self.beside[i].append(w)

    @property
    def joules(self) -> float | None:
        """This rank's training joules so far (None once a segment's meter was not read)."""
        return joules_of(self.windows)


def joules_of(windows: list[EnergyWindow]) -> float | None:
    """The summed gross joules of ``windows`` (None when any could not be read; 0 for none)."""
    if any(w.energy_j is None for w in windows):
        return None
    return math.fsum(w.energy_j for w in windows if w.energy_j is not None)


def merged_window(windows: list[EnergyWindow]) -> EnergyWindow | None:
    """One window for a run's segments: seconds and joules summed (a component None where a
    segment lacks it), power samples laid end to end on the training clock, notes kept once."""
    if not windows:
        return None
    first = windows[0]

    def total(name: str) -> float | None:
        values = [getattr(w, name) for w in windows]
        return None if any(v is None for v in values) else math.fsum(values)

    samples: list[PowerSample] = []
    offset = 0.0
    for w in windows:
        samples.extend(replace(s, t_s=s.t_s + offset) for s in w.samples)
        offset += w.seconds
    notes = list(dict.fromkeys(w.note for w in windows if w.note))
    sources = sorted({w.source for w in windows})
    return EnergyWindow(
        source="+".join(sources) if len(sources) > 1 else first.source,
        measured=all(w.measured for w in windows),
        seconds=math.fsum(w.seconds for w in windows),
        energy_j=joules_of(windows),
        energy_gpu_j=total("energy_gpu_j"),
        energy_cpu_j=total("energy_cpu_j"),
        energy_dram_j=total("energy_dram_j"),
        samples=tuple(samples),
        note="; ".join(notes),
    )


def agreed(ctx: DistContext, seconds: float, joules: float | None) -> tuple[float, float | None]:
    """The longest rank's training seconds and the ranks' summed joules (None where a rank's
    meter was not read), the same on every rank."""
    if not ctx.distributed:
        return seconds, joules
    import torch.distributed as dist

    t = torch.tensor([seconds], dtype=torch.float64, device=_collective_device(ctx))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    j = torch.tensor(
        [math.nan if joules is None else joules, 1.0 if joules is None else 0.0],
        dtype=torch.float64,
        device=_collective_device(ctx),
    )
    dist.all_reduce(j)
    return float(t.item()), None if j[1].item() > 0 else float(j[0].item())


def _collective_device(ctx: DistContext) -> torch.device:
    return ctx.device if ctx.device.type == "cuda" else torch.device("cpu")


def train_to_target(
    spec: RunSpec,
    ctx: DistContext,
    strategy: Strategy,
    model: torch.nn.Module,
    comm: CommRecorder,
    workload: TrainingWorkload,
    repeat: int,
    target_loss: float,
) -> RankResult:
    """Train ``model`` from initialisation until its held-out loss reaches ``target_loss`` or
    the run's budget ends; returns this rank's result for repeat ``repeat``."""
    config = spec.config
    train, every, budget, debug = config.train, config.eval.every, config.target, config.debug
    if workload.held_out is None:
        raise ValueError("a run to a target needs the workload's held-out set")
    model.train()
    optimizer = strategy.wrap_optimizer(
        make_optimizer(strategy.parameters(model), train.lr, ctx.device)
    )
    schedule = strategy.schedule(workload.loss)
    assignment, batches, flops = strategy.assignment, workload.batches, workload.flops
    held_out = assignment.batch(workload.held_out, 0)
    faults = Faults(
        debug.fail_rank, debug.hang_rank, debug.kill_rank, debug.oom_rank,
        at_microbatch=debug.fault_microbatch,
    )  # fmt: skip
    meters = rank_meters(
        spec, ctx.device.type, ctx.device.index or 0, ctx.local_rank, rank=ctx.rank
    )
    memory = StateMemory(model, optimizer, strategy.parameters(model))
    run = RunTally()
    curve: list[ValPoint] = []
    eval_s, eval_windows = 0.0, []
    step = tokens = 0
    train_s = 0.0
    stopped_by = ""
    comm.take()
    reset_peak_memory(ctx.device)
    memory.reset()
    told = {"repeat": repeat + 1, "repeats": config.run.repeats}
    try:
        while True:
            # evaluate (a window of its own), then decide, the same on every rank
            tell("evaluation", index=len(curve) + 1, **told)
            synchronize(ctx.device)
            meters.begin()
            t0 = time.perf_counter()
            loss_sum, n_tokens = schedule.evaluate(model, held_out)
            synchronize(ctx.device)
            eval_s += time.perf_counter() - t0
            window, _ = meters.end()
            if window is not None:
                eval_windows.append(window)
            comm.take()  # evaluation's calls are not training's
            val_loss = loss_sum / max(n_tokens, 1)
            curve.append(ValPoint(step, tokens, train_s, run.joules, val_loss))
            seconds, joules = agreed(ctx, train_s, run.joules)
            if val_loss <= target_loss and step == 0:
                raise ValueError(
                    f"the untrained model's held-out loss {val_loss:.4f} is already at or below "
                    f"the target {target_loss:.4f}: there is nothing to train for (raise "
                    "target.gap_closed or lower target.loss)"
                )
            if val_loss <= target_loss:
                stopped_by = "reached"
            elif step >= budget.max_steps:
                stopped_by = "max_steps"
            elif budget.max_tokens and tokens >= budget.max_tokens:
                stopped_by = "max_tokens"
            elif budget.max_s and seconds >= budget.max_s:
                stopped_by = "max_s"
            elif budget.max_j and joules is not None and joules >= budget.max_j:
                stopped_by = "max_j"
            if stopped_by:
                break
            # train up to the next evaluation: one measured segment
            segment = WindowTally()
            # whole periods (eval.every is a multiple of one): evaluated where replicas agree
            n = whole_periods(min(every, budget.max_steps - step), strategy.period)
            tell("training to the target", steps=n, **told)
            synchronize(ctx.device)
            meters.begin()
            start = time.perf_counter()
            for _ in range(n):
                t0 = time.perf_counter()
                batch = assignment.batch(batches, step)
                hook = faults.arm(ctx.rank) if step == 0 and repeat == 0 else None
                counting = flops.counting(batch) if step == 0 else contextlib.nullcontext()
                with memory.saving(), counting:
                    loss, times = schedule.train_step(model, optimizer, batch, hook)
                causal = flops.causal_of(batch)
                segment.add(
                    time.perf_counter() - t0,
                    times,
                    loss,
                    batch,
                    flops.of(batch) * strategy.flops_fraction,
                    None if causal is None else causal * strategy.flops_fraction,
                    counted=strategy.counts_tokens,
                    share=strategy.flops_fraction,
                )
                step += 1
                tokens += batch.global_tokens
            synchronize(ctx.device)
            train_s += time.perf_counter() - start
            window, beside = meters.end()
            records = settle_communication(segment, comm, ctx)
            run.absorb(segment, records, window, beside)
        window = merged_window(run.windows)
        if window is not None and train_s < train.min_window_s:
            window = flag_short(window, train_s, train.min_window_s)
        state = memory.read()
        t = run.tally
        outcome = TargetOutcome(
            target_loss=target_loss,
            reached=stopped_by == "reached",
            steps=step,
            tokens=tokens,
            best_val_loss=min(p.val_loss for p in curve),
            eval_s=eval_s,
            eval_energy_j=joules_of(eval_windows) if eval_windows else None,
            stopped_by=stopped_by,
            curve=tuple(curve),
        )
        t.comm_note = "; ".join(run.comm_notes)
        beside = tuple(w for ws in run.beside if (w := merged_window(ws)) is not None)
        comm_records = tuple(run.comm.values())
        return rank_result(
            ctx, repeat, t, train_s, window, comm_records, beside, state, target=outcome
        )
    finally:
        meters.close()
