"""Data parallelism with torch's DistributedDataParallel (``layout.dp_replicate`` ranks).

Gradients are all-reduced once per optimizer step (``no_sync`` on every microbatch but the
last), as gradient accumulation does in practice. Ranks meet only where stock DDP makes them:
in those bucket all-reduces and, for a model with buffers, in DDP's broadcast of them before a
synchronised forward (``broadcast_buffers``, recorded as ``broadcast``). No barrier is added,
so a GPU rank's host runs ahead as it would.

Time in communication: DDP all-reduces gradient buckets asynchronously while backward still
computes, through a communication hook (`greenbench.strategies.ddp_hooks`): DDP's default
arithmetic (divide by the world size, all-reduce with a sum), or a compressed form of it
(``ddp.compress``), its bytes those actually reduced. What a rank loses to them is the tail:
from the moment the step's last bucket became ready (backward has nothing left to compute) until
every bucket's all-reduce has completed. That is recorded as one ``all_reduce`` call per step
with the buckets' bytes (`greenbench.distributed.comm`): on CPU by the wall clock (backward
returns once every all-reduce completed), on CUDA by an event on the compute stream when the
last bucket is handed over and one when its all-reduce completes (the buckets' all-reduces run
in order on one stream, so it completes last; the optimizer step waits for it). Buckets reduced
while backward still computed cost nothing here, as they cost the step nothing.

Waiting: a rank that finished backward early sits in the tail until the slowest rank's last
bucket arrives (or, with buffers, in the broadcast before the synchronised forward, if it got
there first), so the time of the last rank to arrive is the transfer and what another rank
spent beyond it is waiting (`greenbench.rank.window.settle_calls`). DDP's reducer meets the
other ranks once more on its own, unrecorded: when it rebuilds its buckets in the second step,
which the default two warm-up steps keep out of the measured window.

Bounded staleness (``ddp.staleness`` above 0) replaces DDP's reducer with a step of our own
that applies averaged gradients some steps old (`greenbench.strategies.ddp_stale`); infrequent
synchronisation (``ddp.sync``: local SGD, DiLoCo) stops the gradient all-reduce after its
warm-up and averages the parameters every ``ddp.period`` steps through the wrapped optimizer
(`greenbench.strategies.ddp_periodic`). An emulated link (``emulate.link_*``) lengthens each
of these collectives to what it would take between nodes (`greenbench.distributed.link`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.parallel import DistributedDataParallel

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.distributed.device import DistContext
from greenbench.distributed.link import EmulatedLink
from greenbench.strategies.base import DataParallel
from greenbench.strategies.ddp_hooks import DIM, Buckets, register_comm_hook
from greenbench.strategies.ddp_settings import DDPSettings
from greenbench.strategies.ddp_stale import StaleSchedule, replicate
from greenbench.strategies.schedule import StepSchedule

if TYPE_CHECKING:
    from greenbench.config import Config
    from greenbench.sources.contract import Loss, ModelSource


class DDP(DataParallel):
    name = "ddp"
    buckets: Buckets
    #: the run's ``ddp`` section (compression, synchronisation, staleness) and emulated link
    settings: DDPSettings = DDPSettings()
    link: EmulatedLink = EmulatedLink()
    #: the bounded-staleness schedule (``ddp.staleness`` > 0), drained on `close`
    stale: StaleSchedule | None = None
    #: the communication hook's state (`greenbench.strategies.ddp_hooks.register_comm_hook`)
    hook_state: Any = None

    def configure(self, config: Config) -> None:
        self.settings = config[DDPSettings] or DDPSettings()
        self.link = EmulatedLink.of(config)

    def parallelize(self, model: ModelSource) -> torch.nn.Module:
        module = model.build(self.ctx.device)
        group = self.mesh.get_group(DIM) if self.mesh is not None else None
        if self.settings.staleness > 0:  # replicas without DDP's reducer (ddp_stale)
            return replicate(module, group)
        periodic = self.settings.sync != "every-step"  # local-sgd, diloco
        ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        # local SGD and DiLoCo average parameters only: no broadcast of buffers each forward
        extra = {"broadcast_buffers": False} if periodic else {}
        ddp = DistributedDataParallel(module, device_ids=ids, device_mesh=self.mesh, **extra)
        self.buckets = Buckets()
        if periodic:
            from greenbench.strategies.ddp_periodic import register_post_local_hook

            register_post_local_hook(self, ddp, group)
            return ddp
        self.hook_state = register_comm_hook(
            ddp, self.settings, link=self.link, comm=self.comm, buckets=self.buckets,
            group=group, world=self.layout.dp_replicate,
        )  # fmt: skip
        record_buffer_broadcast(ddp, self.comm)
        return ddp

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The run's optimizer, wrapped for ``ddp.sync`` (`greenbench.strategies.ddp_periodic`)."""
        if self.settings.sync == "every-step":
            return optimizer
        from greenbench.strategies.ddp_periodic import periodic_optimizer

        return periodic_optimizer(self, optimizer)

    @property
    def period(self) -> int:
        """``ddp.period`` where parameters are synchronised every that many steps, else 1."""
        return 1 if self.settings.sync == "every-step" else self.settings.period

    def schedule(self, loss: Loss) -> StepSchedule:
        """The shared step, gradients synchronised once (after `parallelize`); with
        ``ddp.staleness`` > 0, the step of `greenbench.strategies.ddp_stale`."""
        if self.settings.staleness > 0:
            self.stale = StaleSchedule(
                self.ctx,
                self.comm,
                loss,
                staleness=self.settings.staleness,
                group=self.mesh.get_group(DIM) if self.mesh is not None else None,
                world=self.layout.dp_replicate,
                link=self.link,
            )
            return self.stale
        return DDPSchedule(self.ctx, self.comm, loss, self.buckets)

    def close(self) -> None:
        """Wait for the bounded-staleness all-reduces still in flight (none under DDP)."""
        if self.stale is not None:
            self.stale.close()


def record_buffer_broadcast(ddp: DistributedDataParallel, comm: CommRecorder) -> None:
    """Record DDP's broadcast of the module's buffers before a synchronised forward (stock
    DDP's ``broadcast_buffers``; a model without buffers has none). It is synchronous, so ranks
    meet in it: a rank that reached it early waits there. DDP issues it through one private
    method, wrapped here; a torch without it leaves the broadcast unrecorded."""
    original = getattr(ddp, "_distributed_broadcast_coalesced", None)
    if original is None:  # pragma: no cover - another torch layout
        return

    def recorded(tensors, buffer_size, authoritative_rank=0):  # type: ignore[no-untyped-def]
        with comm.span(DIM, "broadcast", sum(tensor_bytes(t) for t in tensors)):
            original(tensors, buffer_size, authoritative_rank)

    ddp._distributed_broadcast_coalesced = recorded  # type: ignore[method-assign]


class DDPSchedule(StepSchedule):
    """Gradients synchronised on the last microbatch only; on CPU, the time backward then
    spends blocked in the all-reduces recorded (on CUDA the hook records it)."""

    def __init__(self, ctx: DistContext, comm: CommRecorder, loss: Loss, buckets: Buckets) -> None:
        super().__init__(ctx, comm, loss)
        self.buckets = buckets

    @contextlib.contextmanager
    def microbatch(self, model: torch.nn.Module, last: bool) -> Iterator[None]:
        if not last:
            with model.no_sync():
                yield
            return
        self.buckets.last_ready, self.buckets.nbytes = 0.0, 0
        yield
        if self.buckets.last_ready:  # backward returned once every bucket's all-reduce completed
            blocked = max(0.0, time.perf_counter() - self.buckets.last_ready)
            self.comm.add(DIM, "all_reduce", self.buckets.nbytes, blocked)

    def loss_scale(self, global_tokens: int) -> float:
        # DDP averages gradients over ranks; scale up so the result is sum / global_tokens.
        return self.ctx.world_size / global_tokens
