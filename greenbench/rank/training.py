"""What a rank's training loops share, a window run's (`greenbench.rank.worker`) and a run to a
target's (`greenbench.rank.to_target`): the optimizer, the device's peak memory, the settling of
a window's communication, and the note on a window too short for its meter."""

from __future__ import annotations

import math
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.device import DistContext
from greenbench.energy.base import EnergyWindow
from greenbench.rank.state_memory import StateBytes
from greenbench.rank.window import WindowTally, settle_calls, unsplit_note
from greenbench.results import CommRecord, RankResult


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:  # Linux: writing 5 resets the process's peak RSS (VmHWM)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_memory_bytes(device: torch.device) -> int:
    """Peak device memory (cuda) or peak resident set size of this process (cpu)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def make_optimizer(params: Any, lr: float, device: torch.device) -> torch.optim.Optimizer:
    """AdamW as the field runs it: on CUDA the fused implementation (one kernel for every
    parameter's update, as torchtitan's default), on CPU torch's default (foreach), which
    the CPU reference runs were measured with. `optimizer_kernel` names which, for the run's
    record."""
    if optimizer_kernel(device.type) == "adamw-fused":
        return torch.optim.AdamW(params, lr=lr, fused=True)
    return torch.optim.AdamW(params, lr=lr)


def whole_periods(steps: int, period: int) -> int:
    """``steps`` rounded up to whole periods of ``period`` steps (`Strategy.period`): a window or
    a stretch between evaluations that starts where the replicas agree ends where they agree
    again."""
    return -(-steps // period) * period


def optimizer_kernel(device: str) -> str:
    """The AdamW implementation `make_optimizer` picks on ``device`` ("cpu" or "cuda")."""
    return "adamw-fused" if device == "cuda" else "adamw-foreach"


def settle_communication(
    tally: WindowTally, comm: CommRecorder, ctx: DistContext
) -> list[CommRecord]:
    """This window's communication records, with the tally's split made from them: every
    rank's calls are exchanged (after the window closed: that is not part of what is measured),
    each call split into transfer and waiting (`settle_calls`), and the step time not spent in
    either is compute. Where the ranks' collectives cannot be matched call by call, the tally's
    ``comm_note`` says that their waiting is unknown (`unsplit_note`)."""
    calls = [(c.dim, c.op, c.nbytes, c.seconds, c.waits) for c in comm.take()]
    return settle_calls_of(tally, calls, ctx)


def settle_calls_of(
    tally: WindowTally, calls: list[tuple[str, str, int, float, bool]], ctx: DistContext
) -> list[CommRecord]:
    """`settle_communication` of calls this rank recorded as (dim, op, bytes, seconds,
    waits), in issue order (a fault-tolerant run keeps each step's in its ledger)."""
    per_rank: list[Any] = [calls]
    rank = 0
    if ctx.distributed:
        import torch.distributed as dist

        # the current group's (a SkipPipe run's survivors regroup when a node is killed)
        per_rank = [None] * dist.get_world_size()
        dist.all_gather_object(per_rank, calls)
        rank = dist.get_rank()
    records, transfer, waiting = settle_calls(per_rank, rank)
    tally.comm_s, tally.wait_s = transfer, waiting
    tally.comm_note = unsplit_note(per_rank)
    tally.compute_s = math.fsum(tally.step_times_s) - transfer - waiting
    return records


def flag_short(window, seconds: float, min_s: float):
    note = f"window {seconds:.2f} s is shorter than {min_s:.2f} s (raise train.max_steps)"
    return replace(window, note=f"{window.note}; {note}" if window.note else note)


def rank_result(
    ctx: DistContext,
    repeat: int,
    tally: WindowTally,
    seconds: float,
    window: EnergyWindow | None,
    comm: tuple[CommRecord, ...],
    beside: tuple[EnergyWindow, ...],
    state: StateBytes,
    **more: Any,
) -> RankResult:
    """This rank's result for one repeat from its settled tally (a window run's window, or a
    run to a target's segments added up), with ``more`` fields (a target's outcome)."""
    return RankResult(
        rank=ctx.rank,
        local_rank=ctx.local_rank,
        host=socket.gethostname(),
        repeat=repeat,
        tokens=tally.tokens,
        seconds=seconds,
        compute_s=tally.compute_s,
        comm_s=tally.comm_s,
        wait_s=tally.wait_s,
        step_times_s=tuple(tally.step_times_s),
        peak_mem_bytes=peak_memory_bytes(ctx.device),
        flops=tally.flops,
        flops_causal=tally.flops_causal,
        loss=tally.mean_loss,
        n_microbatches=tally.n_microbatches,
        energy=window,
        comm=comm,
        comm_note=tally.comm_note,
        extra_energy=beside,
        param_bytes=state.param_bytes,
        grad_bytes=state.grad_bytes,
        optim_bytes=state.optim_bytes,
        activation_bytes=state.activation_bytes,
        useful_tokens=tally.useful_tokens,
        **more,
    )
