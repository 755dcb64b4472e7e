"""k-way number partitioning: Karmarkar–Karp (largest differencing) plus a swap refinement.

Used to split a minibatch's documents over ranks, and a rank's documents over microbatches,
so that the sums of per-document costs come out nearly equal.

Largest differencing (Karmarkar & Karp 1982; the k-way form as in Michiels et al. 2007): every
item starts as a partial partition with the item in one set and k − 1 empty sets. Repeatedly
take the two partial partitions with the largest spread (max − min set sum) and merge them,
pairing the largest set of one with the smallest of the other, until one remains. With
``equal_size`` the items are first grouped k at a time in sorted order (one per set), which
keeps every set at n / k items. A refinement pass then swaps (or moves) items between the
heaviest and lightest sets while that strictly narrows the pair, which also fills empty sets.

We wrote our own because the ODC repository's packer (sail-sg/odc,
examples/llm_training/packing.py) is example code, not an installable library, and no
maintained library offers k-way largest differencing with arbitrary float costs, an equal-count
variant and refinement. Deterministic: ties break on item index.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np


def karmarkar_karp(
    costs: Sequence[float] | np.ndarray, k: int, *, equal_size: bool = False, refine: bool = True
) -> list[list[int]]:
    """Partition item indices 0…n−1 into ``k`` sets with near-equal cost sums.

    Args:
        costs: non-negative cost of each item.
        k: number of sets (≥ 1). With n < k some sets stay empty.
        equal_size: every set gets exactly n / k items (n must be divisible by k); refinement
            then only swaps, never moves.
        refine: run the swap/move refinement after differencing.

    Returns:
        k lists of item indices (each sorted ascending), ordered by decreasing set sum.
    """
    c = np.asarray(costs, dtype=np.float64)
    n = len(c)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if (c < 0).any() or not np.isfinite(c).all():
        raise ValueError("costs must be finite and non-negative")
    if equal_size and n % k:
        raise ValueError(f"equal_size needs the item count ({n}) divisible by k ({k})")
    order = sorted(range(n), key=lambda i: (c[i], i))
    seeds = [order[i : i + k] for i in range(0, n, k)] if equal_size else [[i] for i in order]
    heap: list[tuple[float, float, int, list[float], list[list[int]]]] = []
    for tick, group in enumerate(seeds):
        sets = [[i] for i in group] + [[] for _ in range(k - len(group))]
        sums = [float(c[i]) for i in group] + [0.0] * (k - len(group))
        heapq.heappush(heap, _state(sums, sets, tick))
    tick = len(seeds)
    while len(heap) > 1:
        *_, sums_a, sets_a = heapq.heappop(heap)
        *_, sums_b, sets_b = heapq.heappop(heap)
        merged = [sets_a[i] + sets_b[k - 1 - i] for i in range(k)]
        merged_sums = [sums_a[i] + sums_b[k - 1 - i] for i in range(k)]
        heapq.heappush(heap, _state(merged_sums, merged, tick))
        tick += 1
    parts = heap[0][4] if heap else [[] for _ in range(k)]
    if refine and k > 1:
        parts = refine_partition(c, parts, allow_moves=not equal_size)
    parts = [sorted(p) for p in parts]
    sums = [float(c[p].sum()) for p in parts]
    return [p for _, p in sorted(zip(sums, parts, strict=True), key=lambda t: (-t[0], t[1]))]


def _state(
    sums: list[float], sets: list[list[int]], tick: int
) -> tuple[float, float, int, list[float], list[list[int]]]:
    """A heap entry (sets by decreasing sum): largest spread first, then largest top set."""
    ranked = sorted(range(len(sets)), key=lambda i: -sums[i])  # stable: deterministic ties
    sets = [sets[i] for i in ranked]
    sums = [sums[i] for i in ranked]
    return (-(sums[0] - sums[-1]), -sums[0], tick, sums, sets)


def refine_partition(
    costs: Sequence[float] | np.ndarray,
    parts: Sequence[Sequence[int]],
    *,
    allow_moves: bool = True,
    max_iters: int | None = None,
) -> list[list[int]]:
    """Improve a partition by exchanging items between its heaviest or lightest set and others.

    Each accepted exchange transfers δ from a heavier set to a lighter one with
    0 < δ < (their difference), choosing δ closest to half the difference; the sum of squared
    set sums strictly falls, so the pass terminates. First the heaviest set is relieved; when
    no exchange helps it, the lightest set is topped up. ``allow_moves`` also permits moving
    a single item (exchanging it for nothing); without it set sizes are preserved.
    """
    c = np.asarray(costs, dtype=np.float64)
    sets = [list(p) for p in parts]
    sums = [float(c[p].sum()) for p in sets]
    eps = 1e-12 * max(1.0, sum(sums))
    limit = max_iters if max_iters is not None else 20 * len(c) + 100
    for _ in range(limit):
        if not (
            _relieve(c, sets, sums, eps, allow_moves, heaviest=True)
            or _relieve(c, sets, sums, eps, allow_moves, heaviest=False)
        ):
            break
    return sets


def _relieve(
    c: np.ndarray,
    sets: list[list[int]],
    sums: list[float],
    eps: float,
    allow_moves: bool,
    *,
    heaviest: bool,
) -> bool:
    """Apply one improving exchange touching the heaviest (or lightest) set; False if none."""
    k = len(sets)
    ext = max if heaviest else min
    anchor = sums.index(ext(sums))
    # Partners: lightest first when relieving the heaviest set, heaviest first otherwise.
    partners = sorted((j for j in range(k) if j != anchor), key=lambda j: (sums[j], j))
    if not heaviest:
        partners.reverse()
    for j in partners:
        hi, lo = (anchor, j) if heaviest else (j, anchor)
        gap = sums[hi] - sums[lo]
        if gap <= eps:
            continue
        give = c[sets[hi]]
        take = c[sets[lo]]
        if allow_moves:
            take = np.append(take, 0.0)  # index len(sets[lo]) means "take nothing back"
        delta = give[:, None] - take[None, :]
        ok = (delta > eps) & (delta < gap - eps)
        if not ok.any():
            continue
        score = np.where(ok, np.abs(delta - gap / 2), np.inf)
        a, b = np.unravel_index(int(np.argmin(score)), score.shape)
        item = sets[hi].pop(int(a))
        if b < len(sets[lo]):
            back = sets[lo].pop(int(b))
            sets[hi].append(back)
        sets[lo].append(item)
        d = float(delta[a, b])
        sums[hi] -= d
        sums[lo] += d
        return True
    return False
