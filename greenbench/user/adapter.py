"""A user workload in the shapes greenbench's strategies and worker already take: a model builder
(`UserBuilder`, as `greenbench.models.ModelBuilder`), a data plan (`UserDataPlan`, as
`greenbench.data.DataPlan`) whose step batches hold one `UserMicrobatch` each, and the FLOPs of
a step (`UserFlops`: given, or counted once).

So a user workload runs through the same strategy code (DDP's and FSDP's wrapping and recorded
collectives, the shared training step, its loss normalisation) as a built-in one. The loss
normalisation is the strategies': a microbatch contributes the sum of its token losses over the
minibatch's tokens, which for a user loss (a mean over its batch) is ``mean × tokens``, and the
minibatch's tokens are this rank's times the data-parallel ranks (every rank's batch is taken to
be the same size, as a DistributedSampler makes them), so every strategy trains on the mean of
the ranks' mean losses, as a DDP script does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from greenbench.data.batches import StepBatch
from greenbench.errors import SpecError
from greenbench.user.contract import Batch, Workload, WorkloadContext, own_settings


def to_device(data: Any, device: torch.device) -> Any:
    """``data`` (a tensor, or tuples, lists and dicts of them) on ``device``."""
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=True)
    if isinstance(data, (list, tuple)):
        return type(data)(to_device(d, device) for d in data)
    if isinstance(data, Mapping):
        return {k: to_device(v, device) for k, v in data.items()}
    return data


@dataclass(frozen=True, slots=True)
class UserMicrobatch:
    """One user `Batch` as a strategy's microbatch: its tokens, and its loss as a sum."""

    batch: Batch
    workload: Workload = field(repr=False)

    @property
    def n_tokens(self) -> int:
        return self.batch.tokens

    def loss_sum(self, model: torch.nn.Module, device: torch.device) -> torch.Tensor:
        """The workload's mean loss × tokens (the sum the strategies' normalisation expects)."""
        loss = self.workload.loss(model, to_device(self.batch.data, device))
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TypeError(
                f"workload {self.workload.name!r}: loss() must return a scalar tensor, got "
                f"{type(loss).__name__}"
            )
        return loss.reshape(()).float() * self.batch.tokens


@dataclass(frozen=True, slots=True)
class UserBuilder:
    """What a strategy receives to build a user workload's model (``ModelBuilder``'s shape)."""

    workload: Workload
    settings: Mapping[str, Any]
    seed: int
    compile: bool = False

    def context(self, device: torch.device, rank: int = 0, world: int = 1) -> WorkloadContext:
        return WorkloadContext(
            settings=own_settings(self.settings), seed=self.seed, rank=rank, world=world,
            device=torch.device(device),
        )  # fmt: skip

    def build(self, device: str | torch.device | None = None) -> torch.nn.Module:
        """The workload's model, seeded like every greenbench model, built on ``device``."""
        torch.manual_seed(self.seed)
        where = torch.device(device) if device is not None else torch.device("cpu")
        with torch.device(where):
            model = self.workload.build_model(self.context(where))
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"workload {self.workload.name!r}: build_model() returned "
                f"{type(model).__name__}, not a torch.nn.Module"
            )
        model = model.to(where)
        if self.compile:
            for block in self.blocks(model) or [model]:
                block.forward = torch.compile(block.forward)  # type: ignore[method-assign]
        return model

    def blocks(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """The blocks FSDP shards one by one ([]: the model is sharded as one unit)."""
        if self.workload.blocks is None:
            return []
        return list(self.workload.blocks(getattr(model, "module", model)))


@dataclass(frozen=True, slots=True)
class UserDataPlan:
    """The data plan of a user workload: its ``batch(ctx, step)`` for each data-parallel rank."""

    builder: UserBuilder
    device: torch.device

    def part(self, step: int, index: int, parts: int) -> StepBatch:
        """Rank ``index`` of ``parts``'s batch of optimizer step ``step``."""
        wl = self.builder.workload
        batch = wl.batch(self.builder.context(self.device, index, parts), step)
        if not isinstance(batch, Batch):
            raise TypeError(
                f"workload {wl.name!r}: batch() returned {type(batch).__name__}, not a "
                "greenbench.Batch"
            )
        if isinstance(batch.tokens, bool) or not isinstance(batch.tokens, int) or batch.tokens < 1:
            raise TypeError(
                f"workload {wl.name!r}: Batch.tokens must be a positive int, got {batch.tokens!r}"
            )
        return StepBatch(
            microbatches=(UserMicrobatch(batch, wl),),  # type: ignore[arg-type]
            global_tokens=batch.tokens * parts,
            cost=float(batch.tokens),
        )


class UserFlops:
    """FLOPs of a user workload's steps: its FLOPs per token × tokens, given by the workload or
    counted with ``FlopCounterMode`` over the first warm-up step (`counting`)."""

    def __init__(self, per_token: float | None) -> None:
        self.per_token = per_token
        self.counted = per_token is None

    @contextlib.contextmanager
    def counting(self, batch: StepBatch) -> Iterator[None]:
        """Count this step's FLOPs when they were not given (a no-op otherwise)."""
        if self.per_token is not None:
            yield
            return
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        with counter:
            yield
        self.per_token = counter.get_total_flops() / max(batch.n_tokens, 1)

    def of(self, batch: StepBatch) -> float:
        if self.per_token is None:
            raise SpecError("FLOPs per token were neither given nor counted (no warm-up step)")
        return self.per_token * batch.n_tokens
