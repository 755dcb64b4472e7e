"""ODC: on-demand communication for sharded data parallelism over ``layout.dp_shard`` ranks.

The mechanism of "Revisiting Parameter Server in LLM Post-Training" (ICLR 2026,
arXiv 2601.19362), built as the paper describes it rather than approximated with collectives:

* each rank owns a 1/W shard of every unit's parameters (the blocks, and the root: embeddings,
  final norm, head) and an fp32 gradient accumulator for that shard (`Transport`);
* a unit's forward and backward **get** the missing shards straight from their owners, on
  demand, while the next unit's shards are prefetched in a background thread; the owner does
  nothing for it and no other rank has to be at the same unit at the same time;
* after a unit's backward each gradient slice is **pushed** to its owner, whose drain thread
  accumulates it: there is no per-microbatch collective;
* ranks meet **once per minibatch**: a barrier before it starts (nobody reads parameters while an
  owner updates them) and one before the optimizer step, after each rank has seen every one of
  its pushes applied; then each owner steps its own shard (`ODC.parameters` are the shards).

So ranks may run different numbers of microbatches, and the minibatch is balanced over each
rank's whole cost (``data.balance = balanced-cost``, this strategy's default).

Evaluation on the held-out set gets parameters as a training forward does, after the ranks
meet (no rank reads a shard its owner may still be stepping).

Lockstep (``odc.meet = microbatch``, with ``data.balance = same-count``): the same gets and
pushes, but the ranks also meet before every microbatch, as FSDP's collectives make them. Set
beside FSDP2 on ODC's transport (`greenbench.strategies.odc.collectives`) it isolates the
engine (on-demand gets and pushes against per-layer collectives); set beside ODC it isolates
what decoupling the ranks and balancing their whole cost gives.

Communication records: a get is recorded for the time the compute thread was blocked on it (a
prefetched get that finished in time costs nothing), a push for the time spent handing slices
over, the two barriers as waiting. Point-to-point calls differ in number between ranks, so they
count as transfer; the barriers hold the imbalance left over.

Two transports (``odc.transport``): shared memory between CPU ranks of one host
(`SharedMemoryTransport`, the default: a get is a one-sided copy), and point-to-point messages
to a server thread on each owner (`P2PTransport`: across hosts, and on CUDA over NCCL, where a
get is a request answered by the owner's thread), and device memory shared by CUDA IPC between
the GPUs of one node (`CudaIpcTransport`: a get is a one-sided device copy; never run on a GPU
yet). On CUDA the device is synchronised before every barrier, so an owner's step is in memory
before a peer may read its shard. Why our own: neither torch nor any kept library implements
parameter gets served without the owner's compute thread, with owner-applied gradient pushes.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_flatten

from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.device import DistContext, synchronize
from greenbench.strategies.base import DataParallel
from greenbench.strategies.odc.cuda_ipc import CudaIpcTransport
from greenbench.strategies.odc.p2p import P2PTransport
from greenbench.strategies.odc.settings import ODCSettings
from greenbench.strategies.odc.transport import SharedMemoryTransport, Transport
from greenbench.strategies.odc.units import Unit, cut_units
from greenbench.strategies.schedule import StepSchedule, barrier

if TYPE_CHECKING:
    from greenbench.config import Config
    from greenbench.data.batches import StepBatch
    from greenbench.sources.contract import Loss, ModelSource

DIM = "dp_shard"


class ODC(DataParallel):
    name = "odc"
    #: where ranks meet (`ODCSettings.meet`): once per minibatch, or every microbatch as well
    meet: str = "minibatch"
    #: how ranks reach each other's shards (`ODCSettings.transport`): shm, p2p or cuda-ipc
    transport_kind: str = "shm"

    transport: Transport
    units: list[Unit]
    shards: list[torch.nn.Parameter]
    #: the most parameter elements materialised at once on this rank (own shards not counted)
    peak_materialized: int = 0

    # ------------------------------------------------------------------ building

    def parallelize(self, model: ModelSource) -> torch.nn.Module:
        module = model.build(self.ctx.device)
        world = self.layout.dp_shard
        rank = self.dp_rank
        self.units = cut_units(module, model.blocks(module), world)
        self.transport = self._make_transport(rank, world, [u.shard for u in self.units])
        self.shards = []
        for unit in self.units:
            own = self.transport.shard(unit.index)
            own.copy_(unit.shard_of(unit.flat.detach(), rank))
            self.shards.append(torch.nn.Parameter(own))
            unit.release()
        self._prefetch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odc-prefetch")
        self._pending: dict[int, Future[None]] = {}
        self._backward_ready: set[int] = set()
        self._install_hooks(module)
        if self.ctx.distributed:
            synchronize(self.ctx.device)  # the own shards are written before a peer reads them
            dist.barrier()  # every rank maps every other's memory before anyone reads it
        return module

    def _make_transport(self, rank: int, world: int, shard_numels: list[int]) -> Transport:
        """The transport ``odc.transport`` names: shared memory (one host, CPU), point-to-point
        messages (anywhere, CPU or CUDA) or CUDA IPC (the GPUs of one node)."""
        if self.transport_kind == "p2p":
            return P2PTransport(rank, self._dp_ranks(world), shard_numels, self.ctx.device)
        token = [secrets.token_hex(8) if self.ctx.rank == 0 else None]
        if self.ctx.distributed:
            dist.broadcast_object_list(token, src=0)
        if self.transport_kind == "cuda-ipc":
            first = self._dp_ranks(world)[0]  # each data-parallel group's sockets its own
            return CudaIpcTransport(
                rank, world, shard_numels, f"{token[0]}-{first}", self.ctx.device, self._dp_group()
            )
        return SharedMemoryTransport(
            rank,
            world,
            shard_numels,
            str(token[0]),
            connect=dist.barrier if self.ctx.distributed else None,
        )

    def _dp_ranks(self, world: int) -> list[int]:
        """The global ranks of this rank's data-parallel group, by data-parallel rank."""
        names = (self.mesh.mesh_dim_names or ()) if self.mesh is not None else ()
        if DIM in names:
            return dist.get_process_group_ranks(self.mesh.get_group(DIM))  # type: ignore[union-attr]
        return list(range(world))

    def _dp_group(self) -> Any:
        """This rank's data-parallel process group (None: the default group is it)."""
        names = (self.mesh.mesh_dim_names or ()) if self.mesh is not None else ()
        return self.mesh.get_group(DIM) if DIM in names else None  # type: ignore[union-attr]

    def configure(self, config: Config) -> None:
        own = config[ODCSettings]
        if own is not None:
            self.meet = own.meet
            self.transport_kind = own.transport

    def schedule(self, loss: Loss) -> StepSchedule:
        return ODCSchedule(self.ctx, self.comm, loss, self)

    def parameters(self, model: torch.nn.Module) -> Iterator[torch.nn.Parameter]:
        return iter(self.shards)

    def local_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, Any] | None:
        """This rank's flat shards and the optimizer's state over them (ODC shards by hand)."""
        return {"shards": list(self.shards), "optim": optimizer.state_dict()}

    def load_local_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        optimizer.load_state_dict(state["optim"])

    def _install_hooks(self, model: torch.nn.Module) -> None:
        root, blocks = self.units[0], self.units[1:]
        model.register_forward_pre_hook(lambda *_: self._enter(root, grad_views=True))
        model.register_forward_hook(lambda *_: None if torch.is_grad_enabled() else root.release())
        root.flat.register_post_accumulate_grad_hook(lambda _: self._push(root))
        for unit in blocks:
            unit.module.register_forward_pre_hook(
                lambda *_, u=unit: self._enter(u, grad_views=True)
            )
            unit.module.register_forward_hook(lambda _m, _i, out, u=unit: self._leave(u, out))
            unit.flat.register_post_accumulate_grad_hook(lambda _, u=unit: self._push(u))

    # ------------------------------------------------------------------ per unit

    def _enter(self, unit: Unit, *, grad_views: bool) -> None:
        """Before a unit computes: its full parameters in place, the next one prefetching."""
        self._ready(unit)
        if grad_views:
            unit.use_views()
        step = 1 if grad_views else -1
        following = unit.index + step
        if 1 <= following < len(self.units):
            self._fetch_ahead(self.units[following])

    def _leave(self, unit: Unit, output: Any) -> None:
        """After a unit's forward: hook its backward, free its parameters."""
        if torch.is_grad_enabled():
            hooked = False
            for tensor in tree_flatten(output)[0]:
                if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                    tensor.register_hook(lambda _g, u=unit: self._before_backward(u))
                    hooked = True
            if not hooked:
                raise RuntimeError(f"odc: unit {unit.index}'s output carries no gradient")
        unit.release()

    def _before_backward(self, unit: Unit) -> None:
        if unit.index not in self._backward_ready:
            self._backward_ready.add(unit.index)
            self._enter(unit, grad_views=False)

    def _fill(self, unit: Unit) -> None:
        """Copy every owner's shard into the unit's (allocated) flat tensor."""
        data = unit.flat.data  # not the autograd tensor: the refill bumps no version counter
        for owner in range(unit.world):
            self.transport.get(owner, unit.index, unit.shard_of(data, owner))

    def _allocate(self, unit: Unit) -> None:
        unit.allocate()
        live = sum(u.padded for u in self.units if u.materialized)
        self.peak_materialized = max(self.peak_materialized, live)

    def _fetch_ahead(self, unit: Unit) -> None:
        if unit.materialized or unit.index in self._pending:
            return
        self._allocate(unit)
        self._pending[unit.index] = self._prefetch.submit(self._fill, unit)

    def _ready(self, unit: Unit) -> None:
        """The unit's parameters are in place; the time the compute thread waited is a get."""
        nbytes = (unit.world - 1) * unit.shard * unit.flat.element_size()
        pending = self._pending.pop(unit.index, None)
        with self.comm.span(DIM, "get", nbytes):
            if pending is not None:
                pending.result()
            elif not unit.materialized:
                self._allocate(unit)
                self._fill(unit)

    def _push(self, unit: Unit) -> None:
        """After a unit's backward: each gradient slice to its owner, the parameters freed."""
        grad = unit.flat.grad
        unit.flat.grad = None
        self._backward_ready.discard(unit.index)
        if grad is not None:
            nbytes = (unit.world - 1) * unit.shard * grad.element_size()
            with self.comm.span(DIM, "push", nbytes):
                for owner in range(unit.world):
                    self.transport.push(owner, unit.index, unit.shard_of(grad, owner))
        unit.release()

    # ------------------------------------------------------------------ per minibatch

    def start_minibatch(self) -> None:
        """Accumulators zeroed; ranks meet."""
        self.transport.zero_accumulators()
        # nobody reads a shard while its owner may still be updating it
        barrier(self.ctx, self.comm)

    def finish_minibatch(self) -> None:
        """Every push applied, ranks met, the owners' gradients in their shards' ``grad``."""
        self.release_all()  # a unit whose backward never ran (no gradient) is freed
        self._backward_ready.clear()
        with self.comm.span(DIM, "push_flush", 0):
            self.transport.flush()
        barrier(self.ctx, self.comm)  # every push of the minibatch has been applied by its owner
        for param, unit in zip(self.shards, self.units, strict=True):
            param.grad = self.transport.accumulator(unit.index)

    def release_all(self) -> None:
        """Every unit's full parameters freed, once any prefetch still writing them is done."""
        for unit in self.units:
            pending = self._pending.pop(unit.index, None)
            if pending is not None:
                pending.result()  # never free memory a prefetch is still writing
            if unit.materialized:
                unit.release()

    # ------------------------------------------------------------------ reading back, closing

    def full_parameters(self) -> dict[str, torch.Tensor]:
        """Every parameter, whole, by its name in the model (read from the owners' shards).

        Every rank calls it: ranks meet first, so no owner is still stepping its shard."""
        if self.ctx.distributed:
            synchronize(self.ctx.device)  # this rank's step is in memory before peers read it
            dist.barrier()
        out: dict[str, torch.Tensor] = {}
        for unit in self.units:
            flat = torch.empty(unit.padded, device=self.shards[unit.index].device)
            for owner in range(unit.world):
                self.transport.get(owner, unit.index, unit.shard_of(flat, owner))
            for name, (_, _, shape, at, n) in zip(unit.names, unit.slots, strict=True):
                out[name] = flat[at : at + n].view(shape).clone()
        return out

    def close(self) -> None:
        self._prefetch.shutdown(wait=True)
        self.transport.close()


class ODCSchedule(StepSchedule):
    """Ranks meet once before and once after each minibatch (`ODC.start_minibatch`,
    `ODC.finish_minibatch`), never per microbatch. Gradients are summed at their owners, never
    averaged, so the shared loss scale, 1 / global tokens, is exact. In lockstep
    (``odc.meet = microbatch``) ranks also meet before every microbatch after the first (the
    minibatch's own barrier precedes the first)."""

    def __init__(self, ctx: DistContext, comm: CommRecorder, loss: Loss, odc: ODC) -> None:
        super().__init__(ctx, comm, loss)
        self.odc = odc
        self._started = 0  # microbatches begun in this minibatch

    def start_minibatch(self) -> None:
        self._started = 0
        self.odc.start_minibatch()

    def finish_minibatch(self) -> None:
        self.odc.finish_minibatch()

    def evaluate(self, model: torch.nn.Module, batch: StepBatch) -> tuple[float, int]:
        """The template (every rank's share through the whole model, each unit's parameters
        got on demand as in a training forward), after the ranks meet: an owner may still be
        stepping its shard, and no rank may read one before the step is done. Whatever a
        forward left gathered is freed after."""
        barrier(self.ctx, self.comm)
        try:
            return super().evaluate(model, batch)
        finally:
            self.odc.release_all()

    @contextlib.contextmanager
    def microbatch(self, model: torch.nn.Module, last: bool) -> Iterator[None]:
        """Lockstep: meet before every microbatch but the first (timed as waiting)."""
        if self.odc.meet == "microbatch" and self._started:
            barrier(self.ctx, self.comm)
        self._started += 1
        yield
