"""The contract every parallel strategy keeps, and the shared training step.

A strategy receives the model builder, its rank's context, the run's device mesh (named
dimensions, one per layout degree above 1) and a communication recorder. It builds the model and
applies itself (`Strategy.apply`), says which part of each minibatch its rank trains on
(`Strategy.batch`, from the run's `DataPlan`), and runs optimizer steps. Data-parallel
strategies split every minibatch over their data-parallel ranks (`DataParallel`); a pipeline or a
skip schedule would assign data its own way. Every collective or point-to-point call a strategy
makes goes through the recorder (`greenbench.distributed.comm`).

The step itself (forward, loss over the whole minibatch's tokens, backward, optimizer) is shared
so that every strategy is measured doing the same arithmetic.

Loss normalisation: each microbatch contributes sum(token losses) / global_tokens, where
global_tokens counts the real tokens of the whole minibatch over all ranks. Data-parallel
gradient reduction averages over ranks, so the local loss is scaled by world_size; the result
equals a single process training on the whole minibatch.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F

from greenbench.distributed.comm import CommRecorder
from greenbench.models.family import fuses_loss
from greenbench.user.adapter import UserMicrobatch
from greenbench.vocabulary import Layout

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from greenbench.data import DataPlan, Microbatch, StepBatch
    from greenbench.models import ModelBuilder


@dataclass(frozen=True, slots=True)
class DistContext:
    """Where this rank runs."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    dtype: torch.dtype  # autocast dtype; float32 means no autocast

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


@dataclass(slots=True)
class StepTimes:
    """Seconds one rank spent in one step, split by what it was doing."""

    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (a no-op on CPU) before reading a clock or a counter."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Strategy(ABC):
    """A way of spreading training over ranks. Register subclasses in ``STRATEGIES``.

    ``applies`` names the layout degrees the strategy can apply (any other must be 1) and
    ``fills`` the degree that takes the ranks the others leave (None: one rank); the spec
    resolves a run's layout from them (`greenbench.vocabulary.resolve_layout`).
    """

    name: ClassVar[str]
    applies: ClassVar[frozenset[str]] = frozenset()
    fills: ClassVar[str | None] = None
    #: how a minibatch is split when ``data.balance`` is ``auto`` (`greenbench.data.packing`)
    balance: ClassVar[str] = "same-count"
    #: called with each microbatch's index before it runs (the worker's fault injection)
    on_microbatch: Callable[[int], None] | None = None

    def __init__(
        self,
        ctx: DistContext,
        mesh: DeviceMesh | None = None,
        comm: CommRecorder | None = None,
        layout: Layout | None = None,
    ) -> None:
        self.ctx = ctx
        self.mesh = mesh
        self.comm = comm if comm is not None else CommRecorder(ctx.device)
        self.layout = layout if layout is not None else self.default_layout(ctx.world_size)

    @classmethod
    def default_layout(cls, world: int) -> Layout:
        """The layout of ``world`` ranks when nothing else is given."""
        return Layout(**{cls.fills: world}) if cls.fills else Layout()

    @classmethod
    def validate(cls, settings: Mapping[str, Any], layout: Layout) -> None:
        """Raise SpecError for settings this strategy cannot run with (none by default)."""
        return None

    def configure(self, settings: Mapping[str, Any]) -> None:
        """Take the run's settings before `apply` (strategies that need more than the layout)."""
        return None

    @abstractmethod
    def apply(self, builder: ModelBuilder) -> torch.nn.Module:
        """Build the model on this rank's device and prepare it for the layout."""

    @abstractmethod
    def batch(self, plan: DataPlan, step: int) -> StepBatch:
        """What this rank trains on in optimizer step ``step``."""

    def parameters(self, model: torch.nn.Module) -> Iterator[torch.nn.Parameter]:
        """What this rank's optimizer steps (the model's parameters, or this rank's shards)."""
        return model.parameters()

    def close(self) -> None:
        """Release what the strategy holds beyond the process group (threads, memory)."""
        return None

    @contextlib.contextmanager
    def microbatch(self, model: torch.nn.Module, last: bool) -> Iterator[None]:
        """Context for one microbatch's forward+backward (e.g. skip gradient sync)."""
        yield

    def wait_point(self, index: int, count: int) -> bool:
        """Whether ranks meet before microbatch ``index`` (a timed barrier = waiting time)."""
        return False

    def start_minibatch(self) -> None:
        """Before a minibatch's first microbatch (after the gradients were zeroed)."""
        return None

    def finish_minibatch(self) -> None:
        """After a minibatch's last microbatch, before the optimizer step."""
        return None

    def loss_scale(self, global_tokens: int) -> float:
        return 1.0 / global_tokens

    def train_step(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: StepBatch,
    ) -> tuple[float, StepTimes]:
        """One optimizer step over this rank's microbatches; returns (summed loss, times).

        ``times`` splits the step by the communication recorded during it; on CUDA, where
        calls are timed by events read after the window, it holds the step's whole time as
        compute and the window's records split it afterwards."""
        times = StepTimes()
        device = self.ctx.device
        mark = self.comm.mark()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = self.forward_backward(model, batch)
        optimizer.step()
        synchronize(device)
        total = time.perf_counter() - start
        calls = [c for c in self.comm.since(mark) if c.events is None]
        times.wait_s = math.fsum(c.seconds for c in calls if c.waits)
        times.comm_s = math.fsum(c.seconds for c in calls if not c.waits)
        times.compute_s = total - times.wait_s - times.comm_s
        return float(loss_sum), times

    def forward_backward(self, model: torch.nn.Module, batch: StepBatch) -> torch.Tensor:
        """Forward and backward of this rank's microbatches, gradients accumulated; returns the
        summed (unscaled) loss."""
        scale = self.loss_scale(batch.global_tokens)
        loss_sum = torch.zeros((), device=self.ctx.device)
        count = len(batch.microbatches)
        self.start_minibatch()
        for i, mb in enumerate(batch.microbatches):
            if self.on_microbatch is not None:
                self.on_microbatch(i)
            if self.wait_point(i, count):
                self.barrier()
            with self.microbatch(model, last=i == count - 1):
                loss = self.microbatch_loss(model, mb)
                (loss * scale).backward()
            loss_sum += loss.detach()
        self.finish_minibatch()
        return loss_sum

    @property
    def counts_tokens(self) -> bool:
        """Whether this rank's tokens, FLOPs and loss count in the run's totals: False on ranks
        that train the same tokens as another (tensor, pipeline and context parallel ranks of
        one data-parallel part), so that each token is counted once."""
        return True

    @property
    def flops_fraction(self) -> float:
        """The share of the model's FLOPs per token this strategy computes (below 1 where
        microbatches skip layers)."""
        return 1.0

    def microbatch_loss(self, model: torch.nn.Module, mb: Microbatch) -> torch.Tensor:
        """Sum of next-token cross-entropies over the real tokens of one microbatch (a user
        workload's microbatch computes its own loss: `greenbench.user.adapter`)."""
        device = self.ctx.device
        if isinstance(mb, UserMicrobatch):
            with self.autocast():
                return mb.loss_sum(model, device)
        input_ids = mb.input_ids.to(device, non_blocking=True)
        labels = mb.labels.to(device, non_blocking=True)
        position_ids = mb.position_ids.to(device, non_blocking=True)
        if fuses_loss(model):  # the forward computes the summed loss, fused with the LM head
            with self.autocast():
                return forward_fused_loss(model, input_ids, position_ids, labels)
        with self.autocast():
            logits = forward_logits(model, input_ids, position_ids)
        return F.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(),
            labels[:, 1:].flatten(),
            ignore_index=-100,
            reduction="sum",
        )

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast to the run's precision (nothing in float32)."""
        if self.ctx.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.ctx.device.type, dtype=self.ctx.dtype)

    def barrier(self) -> float:
        """Meet the other ranks (recorded as waiting on the world group); return the seconds."""
        if not self.ctx.distributed:
            return 0.0
        import torch.distributed as dist

        synchronize(self.ctx.device)
        t0 = time.perf_counter()
        dist.barrier()
        seconds = time.perf_counter() - t0
        self.comm.add("world", "barrier", 0, seconds, waits=True)
        return seconds


class DataParallel(Strategy):
    """A strategy whose data-parallel ranks each train on their own part of every minibatch
    (the parts ``DataPlan`` makes for ``layout.dp`` ranks)."""

    @classmethod
    def validate(cls, settings: Mapping[str, Any], layout: Layout) -> None:
        from greenbench.data import DataPlan

        DataPlan.check_split(settings["data.global_batch"], layout.dp)

    @property
    def dp_rank(self) -> int:
        """This rank's index among the data-parallel ranks (row-major over the dp dims)."""
        if self.mesh is None:  # the whole world is data-parallel
            return self.ctx.rank
        names = self.mesh.mesh_dim_names or ()
        coordinate = self.mesh.get_coordinate() or []
        index = 0
        for name, size, at in zip(names, self.mesh.shape, coordinate, strict=True):
            if name in ("dp_replicate", "dp_shard"):
                index = index * size + at
        return index

    def batch(self, plan: DataPlan, step: int) -> StepBatch:
        return plan.part(step, self.dp_rank, self.layout.dp)


def forward_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor
) -> torch.Tensor:
    """Logits of a Hugging Face causal LM; position ids go only to models that take them
    (Llama does, so packed documents restart their positions; Mamba has none)."""
    if takes_position_ids(type(getattr(model, "module", model))):
        return model(input_ids=input_ids, position_ids=position_ids).logits
    return model(input_ids=input_ids).logits


def forward_fused_loss(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    labels: torch.Tensor,
) -> torch.Tensor:
    """The summed next-token loss of a model that computes it in its forward
    (`greenbench.models.family.fuses_loss`): ``num_items_in_batch=1`` makes its reduction a
    sum, the quantity `Strategy.microbatch_loss` computes from logits."""
    extra = {"position_ids": position_ids}
    if not takes_position_ids(type(getattr(model, "module", model))):
        extra = {}
    return model(input_ids=input_ids, labels=labels, num_items_in_batch=1, **extra).loss


@functools.cache
def takes_position_ids(cls: type) -> bool:
    return "position_ids" in inspect.signature(cls.forward).parameters
