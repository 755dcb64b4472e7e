"""The contract every parallel strategy keeps: three parts, and what its ranks count.

A strategy receives its rank's context, the run's device mesh (named dimensions, one per layout
degree above 1), a communication recorder and the layout, and supplies:

1. a **parallelize** function (`Strategy.parallelize`): the model transform — build the model
   from the workload's model source on this rank's device and wrap, shard or split it for the
   layout;
2. a **data-assignment** policy (`Strategy.assignment`, `greenbench.strategies.assignment`):
   which part of each minibatch this rank trains on;
3. a **step schedule** (`Strategy.schedule`, `greenbench.strategies.schedule`): forward and
   backward over the rank's microbatches with the workload's loss, and the optimizer step.

Every collective or point-to-point call a strategy makes goes through the recorder
(`greenbench.distributed.comm`). What the spec knows of a strategy without torch is its card
(`greenbench.strategies.cards`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.device import DistContext
from greenbench.strategies import STRATEGIES
from greenbench.strategies.assignment import DataAssignment, DataParallelShare
from greenbench.vocabulary import Layout

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from greenbench.config import Config
    from greenbench.sources.contract import Loss, ModelSource
    from greenbench.strategies.schedule import StepSchedule


class Strategy(ABC):
    """A way of spreading training over ranks; its card in `greenbench.strategies.cards` names
    it (``name``) and the layout degrees it applies."""

    name: ClassVar[str]

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
        if layout is None:
            layout = STRATEGIES[self.name].default_layout(ctx.world_size)
        self.layout = layout

    def configure(self, config: Config) -> None:
        """Take the run's settings, as their typed sections, before `parallelize` (strategies
        that need more than the layout)."""
        return None

    @abstractmethod
    def parallelize(self, model: ModelSource) -> torch.nn.Module:
        """Build the model on this rank's device and prepare it for the layout."""

    @property
    @abstractmethod
    def assignment(self) -> DataAssignment:
        """Which part of each minibatch this rank trains on."""

    @abstractmethod
    def schedule(self, loss: Loss) -> StepSchedule:
        """How this rank runs an optimizer step of the parallelized model with ``loss``."""

    def parameters(self, model: torch.nn.Module) -> Iterator[torch.nn.Parameter]:
        """What this rank's optimizer steps (the model's parameters, or this rank's shards)."""
        return model.parameters()

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The optimizer the rank's loop steps, made from the run's optimizer over `parameters`
        (a strategy whose method lives in the optimizer step wraps it: DDP's local SGD and
        DiLoCo average parameters there). Called once, before the first step."""
        return optimizer

    @property
    def period(self) -> int:
        """Steps between the points where the ranks' replicas agree (1: after every step). The
        rank's loop keeps measured windows to whole periods starting at such a point, and a run
        to a target evaluates only there."""
        return 1

    def close(self) -> None:
        """Release what the strategy holds beyond the process group (threads, memory)."""
        return None

    @property
    def state_key(self) -> str:
        """The key this rank's model and optimizer state is checkpointed under
        (`greenbench.rank.checkpoint`): ranks whose state is the same model's, sharded or
        replicated, share it; a pipeline stage holds a model of its own."""
        return "model"

    def local_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, Any] | None:
        """This rank's own training state, for a strategy that shards by hand (saved under its
        rank's key), or None where ``torch.distributed.checkpoint``'s ``get_state_dict`` reads
        the model and optimizer (the default). Its tensors are loaded in place."""
        return None

    def load_local_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Restore what `local_state` returned, once its tensors were loaded in place."""
        raise NotImplementedError(f"{self.name} keeps no local state")

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


class DataParallel(Strategy):
    """A strategy whose data-parallel ranks each train on their own part of every minibatch
    (the parts the batch source makes for ``layout.dp`` ranks)."""

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

    @property
    def assignment(self) -> DataAssignment:
        return DataParallelShare(self.dp_rank, self.layout.dp)
