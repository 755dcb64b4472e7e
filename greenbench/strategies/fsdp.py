"""Fully sharded data parallelism with FSDP2 (``fully_shard``) over ``layout.dp_shard`` ranks.

Each of the family's blocks (`ModelCard.blocks`) is sharded on its own over the mesh's
``dp_shard`` dimension, then the root. As in the post-training frameworks the ODC paper
measures, parameters are all-gathered and gradients reduce-scattered for every microbatch, so
ranks meet at every microbatch, in those collectives and nowhere else: no barrier is added, so a
GPU rank's host runs ahead as under stock FSDP2.

Gradient reduction is a plain sum, divided here through the loss scale
(``set_force_sum_reduction_for_comms`` + ``set_gradient_divide_factor(1)``): gloo has no
PREMUL_SUM, and averaging inside FSDP2 over gloo has been reported to sum instead of average.
The equivalence test against ``single`` guards this.

Precision: a bf16 run keeps float32 shards (the optimizer's master weights), gathers them as
bf16 and reduces gradients in float32 (``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=float32)``, torchtitan's default), with no autocast: the gathered bytes halve.
Single-device and DDP runs autocast instead, as PyTorch's AMP recipe does.

Transport (``fsdp.transport``): gloo by default; ``shared-memory`` carries the same collectives,
each still a meeting of every rank, through ODC's shared memory
(`greenbench.strategies.odc.collectives`), so FSDP2's engine can be measured on ODC's transport.

Time in communication: every all-gather and reduce-scatter FSDP2 issues goes through FSDP2's
``set_custom_all_gather`` / ``set_custom_reduce_scatter`` hooks (subclasses of its default
implementations, which are private to torch: without them nothing is recorded) and into the
communication records (`greenbench.distributed.comm`): wall clock on CPU, where gloo's calls are
synchronous, CUDA events on GPU. Waiting is read from them: the last rank to reach an all-gather
or reduce-scatter waited for no one, so each call's time beyond the ranks' shortest is time a
faster rank spent waiting for a slower one (`greenbench.rank.window.settle_calls`). On GPU a
call's events time it on the stream FSDP2 issues it on (the all-gather stream when gathers are
prefetched), so its waiting is the collective's and may overlap compute on the default stream.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.strategies.base import DataParallel
from greenbench.strategies.fsdp_settings import FSDPSettings
from greenbench.strategies.schedule import StepSchedule

if TYPE_CHECKING:
    from greenbench.config import Config
    from greenbench.data.batches import StepBatch
    from greenbench.sources.contract import Loss, ModelSource
    from greenbench.strategies.odc.collectives import SharedMemoryGroup

try:  # FSDP2's default collectives: public hooks, private classes
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )
except ImportError:  # pragma: no cover - another torch layout: leave collectives unrecorded
    DefaultAllGather = DefaultReduceScatter = None  # type: ignore[assignment,misc]

DIM = "dp_shard"


def _recorded(base: type, comm: CommRecorder, op: str, sized: str, dim: str = DIM) -> Any:
    """An instance of FSDP2 collective class ``base`` that records every call on mesh dimension
    ``dim``; ``sized`` names the argument whose bytes the call moves (the gathered output, the
    reduced input)."""

    class Recorded(base):  # type: ignore[misc,valid-type]
        def __call__(
            self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, *args: Any, **kwargs: Any
        ) -> Any:  # type: ignore[override]
            moved = output_tensor if sized == "output" else input_tensor
            with comm.span(dim, op, tensor_bytes(moved)) as call:
                work = super().__call__(output_tensor, input_tensor, *args, **kwargs)
            if work is not None and comm.uses_events:
                comm.finish_async(call, work)
            return work

    return Recorded()


def replicate_hook(comm: CommRecorder, group: Any, dim: str) -> Any:
    """FSDP2's all-reduce hook for HSDP made here: the reduce-scattered gradient shard
    (``reduce_output``, reduced in place) summed over the replicas in ``group``, recorded as one
    ``all_reduce`` on ``dim`` with the shard's bytes. FSDP2's own HSDP all-reduce has no hook
    that sees it issued (its hook receives the result), so it could not be recorded."""

    def hook(reduce_output: torch.Tensor) -> None:
        with comm.span(dim, "all_reduce", tensor_bytes(reduce_output)):
            dist.all_reduce(reduce_output, group=group)

    return hook


def reshard(model: torch.nn.Module) -> None:
    """Free every gathered parameter of a ``fully_shard``-ed model (after a forward-only pass,
    which leaves the root's gathered: FSDP2 keeps them for the backward that normally
    follows)."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def shard_model(
    model: torch.nn.Module,
    blocks: list[torch.nn.Module],
    mesh: DeviceMesh,
    comm: CommRecorder,
    dim: str,
    param_dtype: torch.dtype | None = None,
    collectives: tuple[type, type] | None = None,
    replicate: tuple[Any, str] | None = None,
) -> None:
    """``fully_shard`` each block, then the root, over the 1-D ``mesh`` (recorded as ``dim``):
    every all-gather and reduce-scatter recorded, gradients summed (see the module doc). With
    ``param_dtype`` (bf16), parameters are gathered and computed in it and gradients reduced in
    float32 over float32 shards (FSDP2's mixed precision, as torchtitan trains).
    ``collectives``: the all-gather and reduce-scatter classes to record instead of FSDP2's
    defaults (`greenbench.strategies.odc.collectives`: the same collectives over shared
    memory). ``replicate``: (process group, dimension) of replicas of these shards (HSDP): each
    reduce-scattered gradient shard is then summed over them too (`replicate_hook`)."""
    policy = MixedPrecisionPolicy()
    if param_dtype is not None:
        policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    gather, scatter = collectives or (DefaultAllGather, DefaultReduceScatter)
    recorded = gather is not None
    for module in model.modules():
        if isinstance(module, FSDPModule):
            if recorded:
                module.set_custom_all_gather(_recorded(gather, comm, "all_gather", "output", dim))
                module.set_custom_reduce_scatter(
                    _recorded(scatter, comm, "reduce_scatter", "input", dim)
                )
            # plain SUM collectives (gloo has no PREMUL_SUM/AVG) and no division: the
            # loss scale already divides by the minibatch's global token count
            module.set_force_sum_reduction_for_comms(True)
            module.set_gradient_divide_factor(1.0)
            if replicate is not None:
                module.set_all_reduce_hook(replicate_hook(comm, *replicate))


class FSDP(DataParallel):
    name = "fsdp"
    #: what carries the collectives (`FSDPSettings.transport`): gloo, or ODC's shared memory
    transport: str = "gloo"
    _shm: SharedMemoryGroup | None = None

    def configure(self, config: Config) -> None:
        own = config[FSDPSettings]
        if own is not None:
            self.transport = own.transport

    def parallelize(self, model: ModelSource) -> torch.nn.Module:
        module = model.build(self.ctx.device)
        mesh = self.mesh
        if mesh is None:
            mesh = init_device_mesh(
                self.ctx.device.type, (self.ctx.world_size,), mesh_dim_names=(DIM,)
            )
        shard_mesh = mesh[DIM] if mesh.ndim > 1 else mesh
        blocks = model.blocks(module)
        collectives = None
        if self.transport == "shared-memory" and self.ctx.distributed:
            collectives = self._shared_memory(module, blocks)
        shard_model(
            module,
            blocks,
            shard_mesh,
            self.comm,
            DIM,
            param_dtype=self.param_dtype,
            collectives=collectives,
        )
        return module

    def _shared_memory(
        self, module: torch.nn.Module, blocks: list[torch.nn.Module]
    ) -> tuple[type, type]:
        """FSDP2's collectives over ODC's shared memory, sized for the largest sharded group."""
        from greenbench.strategies.odc.collectives import (
            fsdp_collectives,
            open_group,
            padded_group_bytes,
        )

        world = self.layout.dp_shard
        if world != self.ctx.world_size:
            raise RuntimeError("fsdp.transport=shared-memory shards over every rank of the run")
        in_blocks = {id(p) for b in blocks for p in b.parameters()}
        root = [p for p in module.parameters() if id(p) not in in_blocks]
        groups = [list(b.parameters()) for b in blocks] + [root]
        self._shm = open_group(self.ctx.rank, world, padded_group_bytes(groups, world))
        return fsdp_collectives(self._shm)

    def close(self) -> None:
        if self._shm is not None:
            self._shm.close()
            self._shm = None

    @property
    def param_dtype(self) -> torch.dtype | None:
        """bf16 runs gather and compute bf16 parameters (FSDP2's mixed precision) instead of
        autocasting float32 ones: half the bytes in every all-gather, as the field runs FSDP."""
        return None if self.ctx.dtype == torch.float32 else self.ctx.dtype

    def schedule(self, loss: Loss) -> StepSchedule:
        return FSDPSchedule(self.ctx, self.comm, loss)


class FSDPSchedule(StepSchedule):
    """The shared step, no autocast: ranks meet only in FSDP2's own collectives."""

    def evaluate(self, model: torch.nn.Module, batch: StepBatch) -> tuple[float, int]:
        """The template (every rank's share through the whole model, FSDP2 gathering each
        unit's parameters as in training), then every unit resharded: without a backward,
        the root's gathered parameters would stay in memory until the next step's."""
        try:
            return super().evaluate(model, batch)
        finally:
            reshard(model)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Nothing to cast: under bf16 the parameters FSDP2 gathers are bf16 already."""
        return contextlib.nullcontext()

    def loss_scale(self, global_tokens: int) -> float:
        # Gradients are summed over ranks (divide factor 1): sum / global_tokens is exact.
        return 1.0 / global_tokens
