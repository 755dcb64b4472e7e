"""Infrequent synchronisation for DDP (``ddp.sync``): ranks train alone and meet every
``ddp.period`` (H) optimizer steps to average their parameters.

- **local-sgd**: torch's own post-local SGD. The DDP model's communication hook is torch's
  ``post_localSGD_hook``: plain gradient all-reduces for ``ddp.local_warmup`` steps, then none
  (``post_local_gradient_allreduce=False``: the hook's default all-reduces within a per-node
  subgroup, which on one host is the whole world, so nothing would be saved). The optimizer is
  wrapped in torch's ``PostLocalSGDOptimizer`` with a ``PeriodicModelAverager``, which
  all-reduces the parameters after the optimizer step on its period.
- **diloco**: our own (`DiLoCo`), as torch has no DiLoCo. Each rank steps the run's AdamW
  (the inner optimizer) on its own gradients for H steps; then the ranks' parameters are
  averaged in one all-reduce, the pseudo-gradient Δ = θ_outer − mean(θ_local) is stepped by an
  outer ``torch.optim.SGD`` with Nesterov momentum on θ_outer (the parameters of the last
  synchronisation), and every rank starts the next period from the new θ_outer. The inner
  optimizer keeps its state across periods.

Where the ranks agree: both methods synchronise after every step count that is a multiple of H
(and local SGD at every step of its warm-up), so the replicas hold the same parameters at those
counts and only there. torch's averager, given ``warmup_steps = ddp.local_warmup``, would
average right after the first local step and every H steps from there (counts W + 1, W + 1 + H,
…); it is given the warm-up that puts its averages on multiples of H instead
(`averager_warmup`), so a measured window of whole periods starts where the replicas agree and a
run to a target evaluates there (``eval.every`` a multiple of H; `check_periodic_evaluation`),
whatever the warm-up. The first local period is then shorter than H when the warm-up is not a
multiple of H.

Recording: gradient all-reduces of local SGD's warm-up are recorded as DDP's
(``all_reduce``, the buckets' bytes, the tail after backward). Each parameter averaging is one
``average`` call on ``dp_replicate`` with the bytes of the parameters averaged, recorded only on
the steps that average. With an emulated link (``emulate.link_*``) each averaging lasts the
link's ring all-reduce time of those bytes longer, spent after it completes, inside its record.
Nothing else communicates between synchronisations: DDP's broadcast of module buffers before
each forward is off (``broadcast_buffers=False``; the models' buffers are constant tables, and
the methods average parameters only).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
    PostLocalSGDState,
    post_localSGD_hook,
)
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.distributed.algorithms.model_averaging.utils import get_params_to_average
from torch.distributed.optim import PostLocalSGDOptimizer
from torch.nn.parallel import DistributedDataParallel

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.distributed.device import DistContext, synchronize
from greenbench.distributed.link import EmulatedLink
from greenbench.strategies.ddp_hooks import DIM, Buckets, Issued
from greenbench.strategies.ddp_settings import DDPSettings
from greenbench.vocabulary import Layout

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


class DDP(Protocol):
    """What this module reads of the DDP strategy (`greenbench.strategies.ddp.DDP`), which
    imports it."""

    ctx: DistContext
    mesh: DeviceMesh | None
    comm: CommRecorder
    layout: Layout
    settings: DDPSettings
    link: EmulatedLink
    buckets: Buckets


def averager_warmup(local_warmup: int, period: int) -> int:
    """The ``warmup_steps`` that makes torch's `PeriodicModelAverager` average after every step
    count that is a multiple of ``period`` past ``local_warmup`` (it averages after step index
    ``s`` when ``s >= warmup_steps`` and ``(s - warmup_steps) % period == 0``): the index of the
    last step of the first whole period after the warm-up."""
    return period * (local_warmup // period + 1) - 1


def register_post_local_hook(strategy: DDP, ddp: DistributedDataParallel, group: Any) -> None:
    """Register on ``ddp`` (built by the strategy for ``ddp.sync`` local-sgd or diloco) a
    communication hook that all-reduces gradients only during local SGD's warm-up."""
    # diloco: local from the first step (no warm-up)
    warmup = strategy.settings.local_warmup if strategy.settings.sync == "local-sgd" else 0
    state = PostLocalSGDState(
        process_group=group,
        subgroup=None,
        start_localSGD_iter=warmup,
        post_local_gradient_allreduce=False,
    )
    cuda = strategy.ctx.device.type == "cuda"
    ddp.register_comm_hook(state, recorded_post_local(strategy.comm, strategy.buckets, cuda))


def recorded_post_local(comm: CommRecorder, buckets: Buckets, cuda: bool) -> Any:
    """torch's ``post_localSGD_hook``, its warm-up all-reduces recorded as DDP's are (the
    buckets' bytes; the tail timed by `greenbench.strategies.ddp.DDPSchedule` on CPU, by events
    here on CUDA); after the warm-up it hands back the rank's own gradients and nothing is
    recorded."""

    # unannotated: DDP checks a hook's annotations against the classes themselves
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        if state.iter >= state.start_localSGD_iter:  # local: no communication
            return post_localSGD_hook(state, bucket)
        buckets.nbytes += tensor_bytes(bucket.buffer())
        if not cuda:
            buckets.last_ready = time.perf_counter()
        elif bucket.is_last():  # the tail: from here until this all-reduce completes
            with comm.span(DIM, "all_reduce", buckets.nbytes) as call:
                fut = post_localSGD_hook(state, bucket)
            return comm.finish_async(call, Issued(fut))
        return post_localSGD_hook(state, bucket)

    return hook


def periodic_optimizer(strategy: DDP, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """``optimizer`` (the run's AdamW) wrapped for ``strategy``'s ``ddp.sync``: torch's
    `PostLocalSGDOptimizer` for local-sgd, `DiLoCo` for diloco."""
    settings, link = strategy.settings, strategy.link
    group = strategy.mesh.get_group(DIM) if strategy.mesh is not None else None
    world, device = strategy.layout.dp_replicate, strategy.ctx.device
    if settings.sync == "local-sgd":
        averager = RecordedAverager(
            settings.period,
            averager_warmup(settings.local_warmup, settings.period),
            group,
            Averaging(strategy.comm, link, world, device),
        )
        return PostLocalSGDOptimizer(optimizer, averager)
    if settings.sync == "diloco":
        return DiLoCo(
            optimizer,
            settings.period,
            settings.outer_lr,
            settings.outer_momentum,
            group,
            Averaging(strategy.comm, link, world, device),
        )
    return optimizer


class Averaging:
    """How a parameter averaging is recorded: one ``average`` call with the bytes averaged,
    lasting the emulated link's all-reduce time longer when a link is set."""

    def __init__(
        self, comm: CommRecorder, link: EmulatedLink, world: int, device: torch.device
    ) -> None:
        self.comm, self.link, self.world, self.device = comm, link, world, device

    def record(self, nbytes: int, average: Callable[[], None]) -> None:
        """Run ``average()`` (the all-reduce) inside the call's record, then the link's time."""
        with self.comm.span(DIM, "average", nbytes):
            average()
            if self.link.active:  # after the real all-reduce has completed
                synchronize(self.device)
                self.link.delay(self.link.all_reduce_s(nbytes, self.world))


class RecordedAverager(PeriodicModelAverager):
    """torch's `PeriodicModelAverager`, each averaging it does recorded (`Averaging`)."""

    def __init__(
        self, period: int, warmup_steps: int, process_group: Any, averaging: Averaging
    ) -> None:
        super().__init__(period=period, warmup_steps=warmup_steps, process_group=process_group)
        self.averaging = averaging

    def averages_now(self) -> bool:
        """Whether `average_parameters` averages at this step (torch's own condition)."""
        return self.step >= self.warmup_steps and (self.step - self.warmup_steps) % self.period == 0

    def average_parameters(self, params: Any) -> None:
        if not self.averages_now():
            super().average_parameters(params)
            return
        params = list(params)
        nbytes = sum(tensor_bytes(p) for p in get_params_to_average(params))
        self.averaging.record(
            nbytes, lambda: super(RecordedAverager, self).average_parameters(params)
        )


class DiLoCo(torch.optim.Optimizer):
    """DiLoCo around an inner optimizer: ``period`` inner steps on the rank's own gradients,
    then an outer Nesterov SGD step on the pseudo-gradient θ_outer − mean over ranks of
    θ_local, from which every rank continues (see the module's docstring). Like torch's
    `PostLocalSGDOptimizer`, it wraps the inner optimizer rather than being one itself: its
    ``param_groups`` are the inner one's, and its ``state`` holds the inner state and the outer
    parameters with their momentum (what the method keeps in memory)."""

    def __init__(
        self,
        inner: torch.optim.Optimizer,
        period: int,
        outer_lr: float,
        outer_momentum: float,
        process_group: Any,
        averaging: Averaging,
    ) -> None:
        self.inner = inner
        self.param_groups = inner.param_groups
        self.period = period
        self.process_group = process_group
        self.averaging = averaging
        self.steps = 0
        self.local = [p for group in inner.param_groups for p in group["params"]]
        self.outer_params = [p.detach().clone() for p in self.local]
        self.outer = torch.optim.SGD(
            self.outer_params, lr=outer_lr, momentum=outer_momentum, nesterov=True
        )

    @property
    def state(self) -> dict[Any, Any]:  # type: ignore[override]
        outer = {p: {"param": p, **self.outer.state.get(p, {})} for p in self.outer_params}
        return {**self.inner.state, **outer}

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        self.inner.step()
        self.steps += 1
        if self.steps % self.period == 0:
            self.synchronise()

    @torch.no_grad()
    def synchronise(self) -> None:
        """Average the ranks' parameters (one all-reduce), step θ_outer on the pseudo-gradient,
        and set every rank's parameters to it."""
        flat = torch.cat([p.detach().reshape(-1) for p in self.local])
        world = dist.get_world_size(self.process_group)

        def average() -> None:
            flat.div_(world)
            dist.all_reduce(flat, group=self.process_group)

        self.averaging.record(tensor_bytes(flat), average)
        means = flat.split([p.numel() for p in self.local])
        for outer, mean in zip(self.outer_params, means, strict=True):
            outer.grad = outer - mean.view_as(outer).to(outer.dtype)
        self.outer.step()
        for outer, p in zip(self.outer_params, self.local, strict=True):
            p.copy_(outer)
            outer.grad = None
