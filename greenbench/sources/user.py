"""A user's workload (`greenbench.user.Workload`) in the workload contract
(`greenbench.sources.contract`): its ``build_model`` as the model source (`UserModel`), its
``batch`` as the batch source (`UserBatches`: one microbatch per step, its ``Batch``), its
``loss`` (`UserLoss`) and its FLOPs given or counted once (`UserFlops`).

So a user workload runs through the same strategy code (DDP's and FSDP's wrapping and recorded
collectives, the shared step schedule, its loss normalisation) as a built-in one. The
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
from greenbench.sources.contract import Autocast, TrainingWorkload
from greenbench.user.contract import Batch, Workload, WorkloadContext


def user_workload(
    workload: Workload,
    own: Mapping[str, Any],
    seed: int,
    device: torch.device,
    *,
    compile: bool = False,
    flops_per_token: float | None = None,
) -> TrainingWorkload:
    """``workload`` on a rank of ``device`` with its own settings ``own`` (names without the
    ``user.`` prefix); ``flops_per_token`` None: counted over the first warm-up step."""
    model = UserModel(workload, own, seed, compile=compile)
    return TrainingWorkload(
        model=model,
        batches=UserBatches(model, device),
        loss=UserLoss(workload),
        flops=UserFlops(flops_per_token),
    )


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
    """One user `Batch` as the microbatch of a step: its data and its real tokens."""

    data: Any
    n_tokens: int


@dataclass(frozen=True, slots=True)
class UserModel:
    """A user workload's model source: ``build_model``, seeded, on the rank's device."""

    workload: Workload
    own: Mapping[str, Any]
    seed: int
    compile: bool = False

    def context(self, device: torch.device, rank: int = 0, world: int = 1) -> WorkloadContext:
        return WorkloadContext(
            settings=dict(self.own), seed=self.seed, rank=rank, world=world,
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
class UserBatches:
    """A user workload's batch source: its ``batch(ctx, step)`` for each data-parallel rank."""

    model: UserModel
    device: torch.device

    def part(self, step: int, index: int, parts: int) -> StepBatch:
        """Rank ``index`` of ``parts``'s batch of optimizer step ``step``."""
        wl = self.model.workload
        batch = wl.batch(self.model.context(self.device, index, parts), step)
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
            microbatches=(UserMicrobatch(batch.data, batch.tokens),),  # type: ignore[arg-type]
            global_tokens=batch.tokens * parts,
            cost=float(batch.tokens),
        )


@dataclass(frozen=True, slots=True)
class UserLoss:
    """A user workload's loss as a sum: its mean loss × the microbatch's tokens."""

    workload: Workload = field(repr=False)

    def __call__(
        self,
        model: torch.nn.Module,
        microbatch: UserMicrobatch,
        device: torch.device,
        autocast: Autocast,
    ) -> torch.Tensor:
        with autocast():
            loss = self.workload.loss(model, to_device(microbatch.data, device))
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TypeError(
                    f"workload {self.workload.name!r}: loss() must return a scalar tensor, got "
                    f"{type(loss).__name__}"
                )
            return loss.reshape(()).float() * microbatch.n_tokens


class UserFlops:
    """FLOPs of a user workload's steps: its FLOPs per token × tokens, given by the workload or
    counted with ``FlopCounterMode`` over the first warm-up step (`counting`); stored as PaLM's
    convention, the causal count unknown."""

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

    def causal_of(self, batch: StepBatch) -> float | None:
        """Unknown: a user's FLOPs are given or counted whole, attention's masked part
        included (`greenbench.vocabulary.flops`)."""
        return None
