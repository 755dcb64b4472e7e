"""Post-training batch planning: cost models, packing documents into rows, assigning to ranks.

A global minibatch of documents of skewed lengths is split over data-parallel ranks, and each
rank's share into microbatches of packed rows. Two modes, after the ODC repository's packer
(sail-sg/odc, examples/llm_training/packing.py; "Revisiting Parameter Server in LLM
Post-Training", arXiv 2601.19362):

- ``same-count`` (``DynamicSameMicro``, the FSDP/DDP baseline): every rank gets the same number
  of documents (cost-balanced by equal-size Karmarkar–Karp) and the same number of
  microbatches (the largest any rank needs), because collective-based data parallelism meets
  at every microbatch (FSDP) or at least needs matching step structure (DDP). Ranks' costs may
  differ; the fast ones wait.
- ``sampler`` (what a plain DDP/FSDP training script does: ``DistributedSampler``'s split): rank
  r takes documents r, r + W, r + 2W, … of the (randomly drawn) minibatch, with no balancing,
  and ranks use the same number of microbatches. The imbalance is the luck of the draw.
- ``balanced-cost`` (``DynamicDiffMicro``, what ODC needs): documents are split by cost with
  free counts (Karmarkar–Karp; the equal-count split is kept instead when it is better, as in
  the ODC repository), and each rank uses as few microbatches as it needs, so counts may
  differ.

In both, a rank's documents are split into M microbatches by Karmarkar–Karp over cost,
starting from the token lower bound for M and raising it until every microbatch first-fit
packs into at most ``rows_per_microbatch`` rows of ``capacity`` tokens (in same-count mode M is
raised on all ranks together). Microbatches are ordered by decreasing cost, so that the m-th
microbatches of different ranks are of similar size.

Cost models (``COST_MODELS``) give a document's cost from its length, with s = tokens / 32,000:
cost = a·s² + b·s, the fits in the ODC repository (1.5B: a = 1.982122, b = 2.611821; 7B:
a = 4.348357, b = 8.768377; its default is linear, cost = tokens). Units are the fits'
own (relative compute time); only ratios matter. See docs/data.md. ``measured`` is the same
form fitted on this machine for the run's model (`greenbench.data.cost_fit`), in seconds of the
tokens actually trained.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from greenbench.data.partition import karmarkar_karp
from greenbench.errors import SpecError

COST_TOKENS_UNIT = 32_000  # s = tokens / COST_TOKENS_UNIT in the ODC repository's fits


def sequence_cost(length_tokens: float | np.ndarray, a: float, b: float) -> float | np.ndarray:
    """a·s² + b·s with s = length_tokens / 32,000."""
    s = np.asarray(length_tokens, dtype=np.float64) / COST_TOKENS_UNIT
    out = a * s * s + b * s
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True, slots=True)
class CostModel:
    """cost(tokens) = a·s² + b·s, s = tokens / 32,000 (``linear`` has b = 32,000: cost = tokens).

    ``trained``: evaluated on the tokens a document is trained with (a fit of this machine),
    not on the full-size length it stands for (the registered fits)."""

    name: str
    a: float
    b: float
    description: str
    trained: bool = False

    def __call__(self, length_tokens: float | np.ndarray) -> float | np.ndarray:
        return sequence_cost(length_tokens, self.a, self.b)


COST_MODELS: dict[str, CostModel] = {
    m.name: m
    for m in (
        CostModel("linear", 0.0, float(COST_TOKENS_UNIT), "cost = tokens (ODC repo default)"),
        CostModel("1.5b", 1.982122, 2.611821, "ODC repo fit for a 1.5B model"),
        CostModel("7b", 4.348357, 8.768377, "ODC repo fit for a 7B model (active in its code)"),
    )
}

#: the cost model fitted on this machine (`greenbench.data.cost_fit`), coefficients given
MEASURED = "measured"

ASSIGN_MODES = ("same-count", "sampler", "balanced-cost")


def get_cost_model(name: str, fit: tuple[float, float] | None = None) -> CostModel:
    """The registered cost model ``name``, or ``measured`` with ``fit``'s ``(a, b)``; SpecError
    listing the valid names, or for ``measured`` without a fit."""
    if name == MEASURED:
        if fit is None or fit[0] < 0 or fit[1] < 0 or fit[0] + fit[1] <= 0:
            raise SpecError(
                "data.cost_model=measured needs this machine's fit (data.cost_a, data.cost_b; "
                "the launcher measures it)"
            )
        return CostModel(MEASURED, fit[0], fit[1], "fitted on this machine", trained=True)
    try:
        return COST_MODELS[name]
    except KeyError:
        names = ", ".join(sorted([*COST_MODELS, MEASURED]))
        raise SpecError(f"unknown cost model {name!r}; choose one of {names}") from None


def pack_sequences(lengths: Sequence[int] | np.ndarray, capacity: int) -> list[list[int]]:
    """First-fit decreasing: bins (lists of indices into ``lengths``) of total ≤ capacity.

    Every length must already be ≤ capacity (truncate first). Ties keep index order, so the
    result is deterministic. O(n · bins), fine for the few thousand documents of a minibatch.
    """
    lens = [int(x) for x in lengths]
    if lens and max(lens) > capacity:
        raise ValueError(f"a sequence of {max(lens)} tokens exceeds the capacity {capacity}")
    bins: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lens)), key=lambda i: (-lens[i], i)):
        for b, room in enumerate(free):
            if lens[i] <= room:
                bins[b].append(i)
                free[b] -= lens[i]
                break
        else:
            bins.append([i])
            free.append(capacity - lens[i])
    return bins


@dataclass(frozen=True, slots=True)
class RankPlan:
    """What one rank trains on in one step: microbatches of rows of document indices.

    microbatches[m][r] lists the documents (indices into the minibatch) packed, in order, into
    row r of microbatch m. microbatch_costs[m] is the summed document cost of microbatch m.
    """

    microbatches: tuple[tuple[tuple[int, ...], ...], ...]
    microbatch_costs: tuple[float, ...]

    @property
    def cost(self) -> float:
        return float(sum(self.microbatch_costs))

    @property
    def documents(self) -> tuple[int, ...]:
        return tuple(d for mb in self.microbatches for row in mb for d in row)


def assign_to_ranks(
    lengths: Sequence[int] | np.ndarray,
    world_size: int,
    mode: str,
    *,
    costs: Sequence[float] | np.ndarray,
    capacity: int,
    rows_per_microbatch: int,
) -> list[RankPlan]:
    """Split a minibatch's documents over ranks and into microbatches (module docstring).

    Args:
        lengths: tokens of each document, each ≤ capacity.
        world_size: number of data-parallel ranks; at most the number of documents.
        mode: "same-count", "sampler" or "balanced-cost".
        costs: cost of each document (e.g. ``COST_MODELS[name](tokens)``).
        capacity: tokens per packed row.
        rows_per_microbatch: at most this many rows per microbatch.

    Returns:
        One RankPlan per rank; every document appears in exactly one of them.
    """
    lens = np.asarray(lengths, dtype=np.int64)
    c = np.asarray(costs, dtype=np.float64)
    n = len(lens)
    if mode not in ASSIGN_MODES:
        raise SpecError(f"unknown balance mode {mode!r}; choose one of {', '.join(ASSIGN_MODES)}")
    if len(c) != n:
        raise ValueError(f"{len(c)} costs for {n} documents")
    if world_size < 1 or rows_per_microbatch < 1:
        raise SpecError("world_size and rows_per_microbatch must be >= 1")
    if n < world_size:
        raise SpecError(f"{n} documents cannot be spread over {world_size} ranks (need >= 1 each)")
    if n and lens.max() > capacity:
        raise ValueError(f"a document of {lens.max()} tokens exceeds the row capacity {capacity}")
    if mode in ("same-count", "sampler"):
        if n % world_size:
            raise SpecError(
                f"{mode} needs the documents per step ({n}) divisible by the ranks ({world_size})"
            )
        if mode == "sampler":
            shares = [list(range(r, n, world_size)) for r in range(world_size)]
        else:
            shares = karmarkar_karp(c, world_size, equal_size=True)
        m = max(_min_microbatches(lens[s], capacity, rows_per_microbatch) for s in shares)
        while True:
            plans = [_split(s, m, lens, c, capacity, rows_per_microbatch) for s in shares]
            if all(p is not None for p in plans):
                return plans  # type: ignore[return-value]
            m += 1
    shares = _rank_shares_by_cost(c, world_size)
    out = []
    for s in shares:
        m = _min_microbatches(lens[s], capacity, rows_per_microbatch)
        while (plan := _split(s, m, lens, c, capacity, rows_per_microbatch)) is None:
            m += 1
        out.append(plan)
    return out


def _rank_shares_by_cost(c: np.ndarray, k: int) -> list[list[int]]:
    """Free-count split by cost, or the equal-count one when its spread is smaller."""
    free = karmarkar_karp(c, k)
    if len(c) % k:
        return free
    equal = karmarkar_karp(c, k, equal_size=True)
    return equal if _spread(c, equal) < _spread(c, free) else free


def _spread(c: np.ndarray, parts: list[list[int]]) -> float:
    sums = [float(c[p].sum()) for p in parts]
    return max(sums) - min(sums)


def _min_microbatches(lens: np.ndarray, capacity: int, rows_per_mb: int) -> int:
    rows = math.ceil(int(lens.sum()) / capacity)
    return max(1, math.ceil(rows / rows_per_mb))


def _split(
    docs: list[int],
    m: int,
    lens: np.ndarray,
    c: np.ndarray,
    capacity: int,
    rows_per_mb: int,
) -> RankPlan | None:
    """Split ``docs`` into m cost-balanced microbatches that each pack; None if one does not."""
    if m > len(docs):
        raise AssertionError("more microbatches than documents (cannot happen: 1 doc always fits)")
    ids = np.asarray(docs, dtype=np.int64)
    groups = karmarkar_karp(c[ids], m)
    mbs = []
    for g in groups:
        if not g:
            return None
        members = ids[g]
        rows = pack_sequences(lens[members], capacity)
        if len(rows) > rows_per_mb:
            return None
        mb = tuple(tuple(int(members[i]) for i in row) for row in rows)
        mbs.append((float(c[members].sum()), mb))
    mbs.sort(key=lambda t: (-t[0], t[1]))
    return RankPlan(tuple(mb for _, mb in mbs), tuple(cost for cost, _ in mbs))


def step_cost(per_rank_costs: Sequence[Sequence[float]], *, lockstep: bool) -> float:
    """Cost-model estimate of one step's critical path (an estimate, never a measurement).

    per_rank_costs[r][m] is the cost of rank r's m-th microbatch (``RankPlan.microbatch_costs``).
    ``lockstep``: ranks meet before every microbatch (FSDP's per-microbatch collectives), so
    the step costs Σ_m max_r; otherwise they meet once per step (DDP's final all-reduce, ODC),
    so it costs max_r Σ_m. A rank with fewer microbatches counts 0 for the missing ones.
    """
    if not per_rank_costs:
        return 0.0
    if not lockstep:
        return float(max(sum(c) for c in per_rank_costs))
    depth = max(len(c) for c in per_rank_costs)
    return float(
        sum(max(c[m] if m < len(c) else 0.0 for c in per_rank_costs) for m in range(depth))
    )
