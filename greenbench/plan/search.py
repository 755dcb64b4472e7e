"""Every valid layout of a model on N devices, predicted, ranked, with its Pareto set.

A layout is valid when its degrees multiply to N, it splits the model as the spec allows
(`greenbench.plan.shapes.misfit`: tp divides heads or inner channels, pp at most the layers, cp
divides the sequence) and the global batch divides over its data-parallel ranks and microbatch.
N devices have one layout per ordered factorisation of N into five degrees: 210 for 64 devices,
so the search is exhaustive and takes milliseconds.

The Pareto set is over three costs to minimise: time per token (step time, equivalently
tokens/s), J/token and peak memory per device, among layouts that fit the device. A layout is on
it when no other fitting layout is at least as good on all three and better on one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from greenbench.errors import SpecError
from greenbench.plan.cost import Batch, Prediction, predict
from greenbench.plan.device import DeviceModel
from greenbench.plan.shapes import ModelShape, misfit
from greenbench.vocabulary import DEGREES, Layout

#: what a plan can be ranked by -> the key (smaller first)
RANKINGS = {
    "energy": lambda p: (p.joules_per_token, p.step_s),
    "time": lambda p: (p.step_s, p.joules_per_token),
    "memory": lambda p: (p.memory.total_b, p.step_s),
}


@dataclass(frozen=True, slots=True)
class Plan:
    """Predictions of every valid layout, ranked (fitting layouts first), and the Pareto set."""

    shape: ModelShape
    devices: int
    batch: Batch
    device: DeviceModel
    ranked: tuple[Prediction, ...]
    pareto: frozenset[Layout]
    rejected: int  # layouts of N devices the model or batch rules out
    rank_by: str = "energy"


def factorisations(n: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every ordered tuple of ``parts`` positive integers whose product is ``n``."""
    if parts == 1:
        yield (n,)
        return
    for d in range(1, n + 1):
        if n % d == 0:
            for rest in factorisations(n // d, parts - 1):
                yield (d, *rest)


def pareto_set(predictions: Sequence[Prediction]) -> frozenset[Layout]:
    """Layouts of the fitting predictions that no other fitting one dominates."""
    fitting = [p for p in predictions if p.fits]
    costs = [(p.step_s, p.joules_per_token, p.memory.total_b) for p in fitting]

    def dominated(c: tuple[float, ...]) -> bool:
        return any(
            all(o <= x for o, x in zip(other, c, strict=True)) and other != c for other in costs
        )

    return frozenset(p.layout for p, c in zip(fitting, costs, strict=True) if not dominated(c))


def plan(
    shape: ModelShape,
    devices: int,
    batch: Batch,
    device: DeviceModel,
    *,
    rank_by: str = "energy",
) -> Plan:
    """Predict every valid layout of ``shape`` on ``devices`` devices. SpecError (one line) for
    impossible input: a device count below 1, a batch that cannot be split, or no valid layout."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise SpecError(f"--devices must be a whole number >= 1, got {devices!r}")
    if batch.seq_len < 1 or batch.micro_batch < 1 or batch.global_batch < 1:
        raise SpecError(
            "--seq-len, --global-batch and --micro-batch must be >= 1, got "
            f"{batch.seq_len}, {batch.global_batch}, {batch.micro_batch}"
        )
    if rank_by not in RANKINGS:
        raise SpecError(f"--rank-by must be one of {', '.join(RANKINGS)}, got {rank_by!r}")
    predictions, rejected = [], 0
    for degrees in factorisations(devices, len(DEGREES)):
        layout = Layout(**dict(zip(DEGREES, degrees, strict=True)))
        why = misfit(shape, layout, batch.seq_len)
        found = None if why else predict(shape, layout, batch, device)
        if found is None:
            rejected += 1
            continue
        predictions.append(found)
    if not predictions:
        raise SpecError(
            f"no layout of {devices} device(s) can train {shape.family}/{shape.size}: "
            f"global batch {batch.global_batch} with micro-batch {batch.micro_batch} "
            f"must divide over the data-parallel ranks, and {shape.family}/{shape.size} "
            f"allows tp | {'/'.join(map(str, shape.tp_divides.values()))}, "
            f"pp <= {shape.n_layers}, cp | {batch.seq_len}"
        )
    key = RANKINGS[rank_by]
    ranked = sorted(predictions, key=lambda p: (not p.fits, key(p)))
    return Plan(
        shape, devices, batch, device, tuple(ranked), pareto_set(predictions), rejected, rank_by
    )
