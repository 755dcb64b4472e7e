"""Every valid layout of a model on N devices, predicted, ranked, with its Pareto set.

A layout is valid when its degrees multiply to N, it splits the model as the spec allows
(`greenbench.models.layout_fits`, the models' one rule: tp divides heads or inner channels, pp at
most the layers, cp divides the sequence and the family has a context-parallel form) and the
global batch divides over its data-parallel ranks and microbatch
(`greenbench.planner.cost.predict`).
N devices have one layout per ordered factorisation of N into
five degrees (210 for 64 devices, 68,906,250 for 735,134,400), but only the data-parallel
degrees can grow with N: tp divides the heads or channels, pp is at most the layers, cp divides
the sequence and dp divides the global batch over the micro-batch. So the search takes the
divisors of N (trial division up to √N), keeps of them the candidates of tp, pp and cp and of
dp, and builds from these the layouts those necessary conditions leave; each is then judged by
`layout_fits` and `predict` as before, so the valid set is exactly the exhaustive one, in the same
order (lexicographic in `DEGREES`), and the ``rejected`` count is every ordered factorisation,
counted from N's prime powers, less the valid ones.

Device counts are planned up to `MAX_DEVICES` = 2^30 (1,073,741,824): about a thousand times the
largest clusters built (10^5–10^6 GPUs), under the 2^31 − 1 ranks torch.distributed's 32-bit
ranks can number, and small enough that factorising N takes at most 32,768 trial divisions and
N has at most 1,344 divisors (735,134,400). Larger counts are refused, and so are sequences and
global batches above 2^30 (a hundred times the longest contexts and the largest batches
trained, ~10^7 tokens and ~10^5 sequences; every figure of the cost model stays finite below
them). What bounds the work is the valid layouts, each priced: a few hundred to a few thousand
for real inputs (208 for 7b on 64 GPUs, 1,660 on 2^20), but a count, global batch and sequence
length all rich in common factors leave hundreds of thousands (587,331 for Mamba 7b on
738,017,280 devices at a global batch of 720,720 and seq 720,720), so a plan counts them first
and prices at most `MAX_LAYOUTS` (50,000: about 2 s at ~40 µs a layout), refusing more.

The Pareto set is over three costs to minimise: time per token (step time, equivalently
tokens/s), J/token and peak memory per device, among layouts that fit the device. A layout is on
it when no other fitting layout is at least as good on all three and better on one. A plan in
which no valid layout fits the device is refused, naming the least memory a layout needs.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from greenbench.errors import SpecError
from greenbench.models import ModelPreset, layout_fits
from greenbench.planner.cost import Batch, Prediction, predict
from greenbench.planner.device import DeviceModel
from greenbench.vocabulary import DEGREES, Layout

#: the most devices a plan is made for (module docstring)
MAX_DEVICES = 2**30
#: the longest sequence and the largest global batch a plan takes (module docstring)
MAX_SEQ_LEN = MAX_GLOBAL_BATCH = 2**30
#: the most valid layouts one plan prices (module docstring)
MAX_LAYOUTS = 50_000

#: what a plan can be ranked by -> the key (smaller first)
RANKINGS = {
    "energy": lambda p: (p.joules_per_token, p.step_s),
    "time": lambda p: (p.step_s, p.joules_per_token),
    "memory": lambda p: (p.memory.total_b, p.step_s),
}


@dataclass(frozen=True, slots=True)
class Plan:
    """Predictions of every valid layout, ranked (fitting layouts first), and the Pareto set."""

    shape: ModelPreset
    devices: int
    batch: Batch
    device: DeviceModel
    ranked: tuple[Prediction, ...]
    pareto: frozenset[Layout]
    rejected: int  # layouts of N devices the model or batch rules out
    rank_by: str = "energy"


def prime_factors(n: int) -> dict[int, int]:
    """``n``'s prime factorisation, prime -> exponent, by trial division up to √n."""
    found: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            found[p] = found.get(p, 0) + 1
            n //= p
        p += 1 if p == 2 else 2
    if n > 1:
        found[n] = found.get(n, 0) + 1
    return found


def divisor_counts(n: int) -> dict[int, int]:
    """Every divisor of ``n`` -> how many divisors it has (from ``n``'s prime powers)."""
    found = {1: 1}
    for p, e in prime_factors(n).items():
        found = {d * p**k: c * (k + 1) for d, c in found.items() for k in range(e + 1)}
    return found


def divisors(n: int) -> list[int]:
    """Every divisor of ``n`` >= 1, ascending."""
    return sorted(divisor_counts(n))


def count_factorisations(n: int, parts: int) -> int:
    """How many ordered tuples of ``parts`` positive integers multiply to ``n``: the product
    over its prime powers p^e of C(e + parts − 1, parts − 1) (each prime's exponent split
    among the parts)."""
    return math.prod(math.comb(e + parts - 1, parts - 1) for e in prime_factors(n).values())


def candidate_layouts(
    shape: ModelPreset, devices: int, batch: Batch, *, most: int = MAX_LAYOUTS
) -> list[Layout]:
    """The layouts of ``devices`` devices that pass the necessary conditions of `layout_fits` and
    `predict` (module docstring), in lexicographic order of their degrees: a superset of the
    valid ones, found without listing every factorisation. SpecError when they are more than
    ``most``."""
    counts = divisor_counts(devices)
    every = sorted(counts)
    tp_must_divide = math.gcd(*shape.tp_divides.values())  # 0 (divisible by all) when none
    tps = [d for d in every if tp_must_divide % d == 0]
    pps = [d for d in every if d <= shape.n_layers]
    cps = [d for d in every if batch.seq_len % d == 0 and (d == 1 or shape.context_parallel)]
    dps = {d for d in every if batch.global_batch % (d * batch.micro_batch) == 0}
    # (dp, tp, pp, cp) with their product N; dp then splits into dp_replicate × dp_shard in as
    # many ways as it has divisors
    degrees = [
        (devices // (tp * pp * cp), tp, pp, cp)
        for tp in tps
        for pp in pps
        for cp in cps
        if devices % (tp * pp * cp) == 0 and devices // (tp * pp * cp) in dps
    ]
    found = sum(counts[dp] for dp, *_ in degrees)
    if found > most:
        raise SpecError(
            f"{devices:,} devices leave {found:,} layouts of {shape.family}/{shape.size} at "
            f"global batch {batch.global_batch:,} and seq {batch.seq_len:,}, more than the "
            f"{most:,} a plan prices; a global batch or --seq-len sharing fewer factors with "
            "--devices leaves fewer"
        )
    split = [
        (dpr, dp // dpr, tp, pp, cp)
        for dp, tp, pp, cp in degrees
        for dpr in every
        if dpr <= dp and dp % dpr == 0
    ]
    return [Layout(**dict(zip(DEGREES, d, strict=True))) for d in sorted(split)]


def pareto_set(predictions: Sequence[Prediction]) -> frozenset[Layout]:
    """Layouts of the fitting predictions that no other fitting one dominates.

    The costs are taken in lexicographic order, so every cost that could dominate one comes
    before it (equal costs together: they do not dominate each other); a cost is dominated when
    some earlier one is at most its J/token and its memory, found on the staircase of the
    earlier costs' (J/token, memory) pairs that no other earlier pair is below on both: sorted by
    J/token, memory falling, so the one to compare is the last with J/token at most this one's.
    """
    fitting = sorted(
        (((p.step_s, p.joules_per_token, p.memory.total_b), p.layout) for p in predictions
         if p.fits),
        key=lambda pair: pair[0],
    )  # fmt: skip
    joules: list[float] = []  # the staircase, ascending
    memory: list[float] = []  # falling
    kept = []
    i = 0
    while i < len(fitting):
        cost = fitting[i][0]
        same = i
        while same < len(fitting) and fitting[same][0] == cost:
            same += 1
        _, j, m = cost
        below = bisect.bisect_right(joules, j) - 1
        if below < 0 or memory[below] > m:  # undominated: keep, and add to the staircase
            kept.extend(layout for _, layout in fitting[i:same])
            at = bisect.bisect_left(joules, j)
            end = at
            while end < len(memory) and memory[end] >= m:
                end += 1
            joules[at:end] = [j]
            memory[at:end] = [m]
        i = same
    return frozenset(kept)


def plan(
    shape: ModelPreset,
    devices: int,
    batch: Batch,
    device: DeviceModel,
    *,
    rank_by: str = "energy",
) -> Plan:
    """Predict every valid layout of ``shape`` on ``devices`` devices. SpecError (one line) for
    impossible input: a device count below 1 or above `MAX_DEVICES`, a batch that cannot be
    split, no valid layout, or none that fits the device."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise SpecError(f"--devices must be a whole number >= 1, got {devices!r}")
    if devices > MAX_DEVICES:
        raise SpecError(f"--devices must be at most {MAX_DEVICES:,}, got {devices}")
    if batch.seq_len < 1 or batch.micro_batch < 1 or batch.global_batch < 1:
        raise SpecError(
            "--seq-len, --global-batch and --micro-batch must be >= 1, got "
            f"{batch.seq_len}, {batch.global_batch}, {batch.micro_batch}"
        )
    for option, value, most in (
        ("--seq-len", batch.seq_len, MAX_SEQ_LEN),
        ("--global-batch", batch.global_batch, MAX_GLOBAL_BATCH),
    ):
        if value > most:
            raise SpecError(f"{option} must be at most {most:,}, got {value}")
    if batch.micro_batch > batch.global_batch:
        raise SpecError(
            f"--micro-batch {batch.micro_batch} is more than --global-batch {batch.global_batch}"
        )
    if batch.global_batch % batch.micro_batch:
        raise SpecError(
            f"--global-batch {batch.global_batch} is not a multiple of "
            f"--micro-batch {batch.micro_batch}"
        )
    if rank_by not in RANKINGS:
        raise SpecError(f"--rank-by must be one of {', '.join(RANKINGS)}, got {rank_by!r}")
    predictions = []
    for layout in candidate_layouts(shape, devices, batch):
        misfit = layout_fits(shape, layout.tp, layout.pp, layout.cp, batch.seq_len)
        found = None if misfit else predict(shape, layout, batch, device)
        if found is not None:
            predictions.append(found)
    rejected = count_factorisations(devices, len(DEGREES)) - len(predictions)
    if not predictions:
        raise SpecError(
            f"no layout of {devices} device(s) can train {shape.family}/{shape.size}: "
            f"global batch {batch.global_batch} with micro-batch {batch.micro_batch} "
            f"must divide over the data-parallel ranks, and {shape.family}/{shape.size} "
            f"allows tp | {'/'.join(map(str, shape.tp_divides.values()))}, "
            f"pp <= {shape.n_layers}, cp | {batch.seq_len}"
        )
    if not any(p.fits for p in predictions):
        leanest = min(predictions, key=lambda p: p.memory.total_b)
        least_state = min(p.memory.state_b + p.memory.buffers_b for p in predictions)
        hint = (
            "its model state alone does not fit: plan for more --devices"
            if least_state > device.usable_memory_bytes
            else "try a shorter --seq-len, a smaller --micro-batch or more --devices"
        )
        raise SpecError(
            f"no layout of {devices} device(s) fits {shape.family}/{shape.size} at seq "
            f"{batch.seq_len:,}, micro-batch {batch.micro_batch} in {device.label} memory: the "
            f"leanest ({leanest.layout.text}) needs {leanest.memory.total_b / 2**30:,.1f} GiB per "
            f"device, {device.usable_memory_bytes / 2**30:,.1f} GiB usable; {hint}"
        )
    key = RANKINGS[rank_by]
    ranked = sorted(predictions, key=lambda p: (not p.fits, key(p)))
    return Plan(
        shape, devices, batch, device, tuple(ranked), pareto_set(predictions), rejected, rank_by
    )
