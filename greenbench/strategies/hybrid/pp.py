"""Pipeline parallelism for the hybrid layouts: torch's ``pipelining`` stages and schedules.

A rank's stage is a run of the family's blocks (`ModelCard.pipeline_stage`), cut evenly
(`stage_bounds`: earlier stages take the remainder, since the last also holds the final norm and
the LM head). The schedule is `ScheduleGPipe` (all forwards, then all backwards),
`Schedule1F1B` (one forward, one backward in steady state: at most ``stages`` microbatches'
activations in flight) or `ScheduleInterleaved1F1B` (``interleaved-1f1b``: the blocks cut into
`VIRTUAL` stages per rank, looped, so rank r holds stages r, r + pp, …, and the bubble shrinks by
that factor for as many more point-to-point messages), chosen by ``train.pp_schedule``; a
minibatch's microbatches go through
it as one call, with gradients summed over microbatches (no scaling by their count: the loss is
already divided by the minibatch's token count).

Evaluation (`Pipeline.evaluate`) goes through the same schedule's forward-only ``eval`` (no
backward, no gradient): torch prepares the stage again when the schedule switches between
training and evaluation.

Every microbatch has the same shape, (micro_batch rows, seq_len tokens): the schedule sizes its
receive buffers from the first one. Shorter microbatches are padded (label −100, so padding
adds compute but no loss), and a dp rank's microbatch count is fixed by the spec.

Communication records: the stages' sends and receives are timed where the schedule waits on
them. torch's schedules issue them through one module-level function (``_batch_p2p``), wrapped
here while a step runs; the wrapper adds nothing else. A receive's time is recorded as waiting
(``waits``): on one host the transfer itself is a small part of it, the rest is the pipeline
bubble, the time a stage has nothing to do until its neighbour's activations or gradients
arrive. Sends are recorded as transfer. All on the mesh dimension ``pp``. If a torch release
moves that function, runs go on without pipeline records (a warning says so).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.pipelining import schedules as _schedules

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.strategies.hybrid.checks import INTERLEAVED_STAGES

log = logging.getLogger(__name__)

DIM = "pp"
SCHEDULES = {
    "gpipe": _schedules.ScheduleGPipe,
    "1f1b": _schedules.Schedule1F1B,
    "interleaved-1f1b": _schedules.ScheduleInterleaved1F1B,
}
#: pipeline stages per rank of each schedule (the others: one)
VIRTUAL = {"interleaved-1f1b": INTERLEAVED_STAGES}


def virtual_stages(schedule: str) -> int:
    """How many stages each rank holds under ``schedule``."""
    return VIRTUAL.get(schedule, 1)


def rank_stages(rank: int, ranks: int, schedule: str) -> list[int]:
    """The stage indices rank ``rank`` of ``ranks`` holds, looped: ``rank, rank + ranks, …``."""
    return [rank + k * ranks for k in range(virtual_stages(schedule))]


def stage_bounds(n_layers: int, stages: int, stage: int) -> tuple[int, int]:
    """Blocks ``[lo, hi)`` of stage ``stage`` of ``stages`` over ``n_layers`` blocks."""
    base, extra = divmod(n_layers, stages)
    lo = stage * base + min(stage, extra)
    return lo, lo + base + (1 if stage < extra else 0)


class _TimedWork:
    """The works of one batch of sends/receives; waiting on it is one recorded call."""

    def __init__(self, works: list[Any], comm: CommRecorder, op: str, nbytes: int) -> None:
        self.works, self.comm, self.op, self.nbytes = works, comm, op, nbytes

    def wait(self, *args: Any) -> bool:
        with self.comm.span(DIM, self.op, self.nbytes, waits=self.op == "recv"):
            for work in self.works:
                work.wait()
        return True


_recording: list[CommRecorder] = []
_original_batch_p2p = getattr(_schedules, "_batch_p2p", None)


def _recorded_batch_p2p(p2p_ops: list[Any], desc: str | None = None) -> list[Any]:
    works = _original_batch_p2p(p2p_ops, desc)  # type: ignore[misc]
    if not _recording or not works:
        return works
    receives = any(op.op is dist.irecv for op in p2p_ops)
    nbytes = sum(tensor_bytes(op.tensor) for op in p2p_ops)
    return [_TimedWork(list(works), _recording[-1], "recv" if receives else "send", nbytes)]


if _original_batch_p2p is not None:
    _schedules._batch_p2p = _recorded_batch_p2p


@contextlib.contextmanager
def recorded(comm: CommRecorder) -> Iterator[None]:
    """Record the schedule's point-to-point calls into ``comm`` while the block runs."""
    if _original_batch_p2p is None:
        log.warning("this torch's pipelining has no _batch_p2p: pipeline calls go unrecorded")
    _recording.append(comm)
    try:
        yield
    finally:
        _recording.pop()


class Pipeline:
    """This rank's stages and the schedule that runs a minibatch through every stage.

    ``stage`` and ``stages`` are the rank's place along ``pp`` and their count: the rank
    holding stage 0 is the first (it embeds), the last rank holds the last stage (the head;
    looped placement puts it there under interleaving too). ``stage_modules`` are the rank's
    stages in `rank_stages` order."""

    def __init__(
        self,
        stage_modules: list[torch.nn.Module],
        *,
        stage: int,
        stages: int,
        device: torch.device,
        group: Any,
        n_microbatches: int,
        schedule: str,
        comm: CommRecorder,
    ) -> None:
        from torch.distributed.pipelining import PipelineStage

        self.stage, self.stages = stage, stages
        self.comm = comm
        self.scale = 1.0
        ids = rank_stages(stage, stages, schedule)
        total = stages * virtual_stages(schedule)
        self.pipe_stages = [
            PipelineStage(module, at, total, device, group=group)
            for module, at in zip(stage_modules, ids, strict=True)
        ]
        held = self.pipe_stages if len(self.pipe_stages) > 1 else self.pipe_stages[0]
        self.schedule = SCHEDULES[schedule](
            held, n_microbatches, loss_fn=self._loss, scale_grads=False
        )

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.stages - 1

    def _loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        summed = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), target.flatten(), ignore_index=-100, reduction="sum"
        )
        return summed * self.scale

    def run(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        labels: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """Forward and backward of a minibatch stacked along dim 0 (microbatches of equal
        shape); returns the summed, unscaled loss on the last stage, 0 elsewhere."""
        self.scale = scale
        losses: list[torch.Tensor] = []
        args = (input_ids, position_ids) if self.first else ()
        kwargs: dict[str, Any] = {"target": labels, "losses": losses} if self.last else {}
        with recorded(self.comm):
            self.schedule.step(*args, **kwargs)
        if not self.last:
            return torch.zeros((), device=input_ids.device)
        return torch.stack([loss.detach() for loss in losses]).sum() / scale

    def evaluate(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        """Forward only, through the same schedule (its ``eval``: no backward, no gradient),
        of ``n_microbatches`` microbatches stacked as in `run`; returns their summed loss on
        the last stage, 0 elsewhere. torch re-prepares the stage when the schedule switches
        between training and evaluation."""
        evaluate = getattr(self.schedule, "eval", None)
        if evaluate is None:  # pragma: no cover - torch before the schedules' eval
            raise RuntimeError(
                "strategy=hybrid with layout.pp > 1 cannot evaluate on this torch: its pipeline "
                "schedules have no forward-only eval()"
            )
        self.scale = 1.0
        losses: list[torch.Tensor] = []
        args = (input_ids, position_ids) if self.first else ()
        kwargs: dict[str, Any] = {"target": labels, "losses": losses} if self.last else {}
        with recorded(self.comm), torch.no_grad():
            evaluate(*args, **kwargs)
        if not self.last:
            return torch.zeros((), device=input_ids.device)
        return torch.stack([loss.detach() for loss in losses]).sum()
