"""What a user's own workload gives greenbench: a model builder, a batch source, a loss, and
what it supports — the small typed object an entry point returns (``mypkg.bench:workload``).

A user workload is measured like a built-in one (the same launcher, strategies, meters, store,
compare, dashboard and reports), so it supplies exactly what greenbench's own workloads get from
``greenbench.models`` and ``greenbench.data``, and nothing about how to measure:

- ``build_model(ctx)``: the model, randomly initialised (greenbench seeds torch's RNG with the
  run's seed first and builds on the rank's device);
- ``batch(ctx, step)``: this rank's share of optimizer step ``step``'s minibatch, as a `Batch`
  (its tensors and its real tokens), deterministic in (seed, step, rank);
- ``loss(model, data)``: the mean loss of the batch's tokens (what a training script
  backpropagates);
- ``flops_per_token``: training FLOPs per token (forward and backward) when the user knows them,
  as a finite number > 0 or a function of the run's settings returning one (a run whose function
  returns anything else fails, with the value in its stored error); otherwise greenbench counts
  them once with torch's ``FlopCounterMode`` over the first warm-up step, and every stored repeat
  says which (`FLOPS_GIVEN`, `FLOPS_COUNTED`);
- ``strategies``: which of greenbench's strategies it runs under (`USER_STRATEGIES`: one rank,
  DDP replicas, FSDP shards; the others need a model family's own split);
- ``settings``: its own settings and their defaults, addressed as ``user.NAME`` on the command
  line and in suites, typed by their defaults, and part of the run's identity;
- ``base`` and ``sweep``: greenbench settings it fixes, and settings it sweeps, as a built-in
  workload's.

Plain dataclasses rather than a base class to subclass: a workload should read like a training
loop's parts, not a plugin framework.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: greenbench strategies a user workload can run under: each needs only a module, its
#: parameters and a loss (tensor, pipeline and context parallel need a family's own plan)
USER_STRATEGIES = ("single", "ddp", "fsdp")
#: the prefix of a user workload's own settings
USER_PREFIX = "user."
#: how a repeat's FLOPs per token were known
FLOPS_GIVEN = "FLOPs per token given by the workload"
FLOPS_COUNTED = (
    "FLOPs per token counted with torch FlopCounterMode over the first warm-up step "
    "(forward and backward; the ops it knows)"
)
#: the types a user setting's default may have (as in greenbench's own settings table)
SETTING_TYPES = (bool, int, float, str)


@dataclass(frozen=True, slots=True)
class WorkloadContext:
    """Where and with what one rank of a user workload runs.

    ``settings`` are the run's values of the workload's own settings, by name without the
    ``user.`` prefix; ``rank`` and ``world`` are this rank's data-parallel index and the number
    of data-parallel ranks (0 and 1 for one process), so ``batch`` can return this rank's share.
    """

    settings: Mapping[str, Any]
    seed: int
    rank: int
    world: int
    device: torch.device


@dataclass(frozen=True, slots=True)
class Batch:
    """One rank's share of one optimizer step: what ``loss`` receives, and its real tokens.

    ``data`` is a tensor, or a tuple, list or dict of tensors (moved to the rank's device before
    ``loss`` sees it); ``tokens`` counts the real (non-padding) tokens it trains on, which
    tokens/s and joules per token are divided by.
    """

    data: Any
    tokens: int


@dataclass(frozen=True, slots=True)
class Workload:
    """A user's own training workload (see the module docstring for each field)."""

    name: str
    build_model: Callable[[WorkloadContext], torch.nn.Module]
    batch: Callable[[WorkloadContext, int], Batch]
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    question: str = ""
    flops_per_token: float | Callable[[Mapping[str, Any]], float] | None = None
    strategies: tuple[str, ...] = ("single", "ddp")
    settings: Mapping[str, Any] = field(default_factory=dict)
    base: Mapping[str, Any] = field(default_factory=dict)
    sweep: Mapping[str, list[Any]] = field(default_factory=dict)
    #: the repeated blocks FSDP shards one by one (None: the whole model as one unit)
    blocks: Callable[[torch.nn.Module], list[torch.nn.Module]] | None = None
    #: tokens per sequence, stored with the run where the workload has one (0: none)
    seq_len: int = 0

    def user_settings(self) -> dict[str, Any]:
        """The workload's own settings and defaults as ``user.NAME`` keys."""
        return {user_key(k): v for k, v in self.settings.items()}

    def flops_per_token_for(self, settings: Mapping[str, Any]) -> float | None:
        """FLOPs per token for a run's own settings (None: count them); ``ValueError`` when the
        workload's function returns anything but a finite number > 0."""
        if callable(self.flops_per_token):
            value = self.flops_per_token(settings)
            if not positive_flops(value):
                raise ValueError(
                    f"workload {self.name!r}: flops_per_token(settings) returned {value!r} for "
                    f"settings {dict(settings)}; it must return a finite number > 0 (training "
                    "FLOPs per token)"
                )
            return float(value)
        return None if self.flops_per_token is None else float(self.flops_per_token)


def positive_flops(value: Any) -> bool:
    """Whether ``value`` can be FLOPs per token: a real number (numpy's too; not a bool), finite,
    > 0."""
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def user_key(name: str) -> str:
    """``width`` or ``user.width`` → ``user.width``."""
    return name if name.startswith(USER_PREFIX) else f"{USER_PREFIX}{name}"


def own_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The ``user.*`` values of a run's settings, by name without the prefix."""
    return {k[len(USER_PREFIX) :]: v for k, v in settings.items() if k.startswith(USER_PREFIX)}
