"""Document-length distributions for synthetic training data, scaled and capped for small runs.

Two kinds of distribution live in ``LENGTH_DISTRIBUTIONS``:

- relative to ``seq_len`` (the row / microbatch budget in tokens): ``fixed`` (every document is
  ``seq_len`` tokens: classic pre-training blocks) and ``uniform`` (uniform integers on
  [max(2, seq_len // 8), seq_len]). ``scale`` does not apply to them.
- absolute, in full-size tokens (Qwen tokenizer), standing for post-training data sets:
  ``longalign`` (LongAlign-10k: lognormal μ = 9.350, σ = 0.55 truncated to [7,000, 58,000];
  p50 13.0k, p90 24.6k), ``swe-smith`` (SWE-smith trajectories: lognormal μ = 10.309, σ = 0.60
  truncated to [2,400, 200,000]; p50 30.0k, p90 64.6k), and ``longalign-loguniform``
  (log-uniform on [8,000, 64,000], a literal reading of LongAlign's "evenly distributed": a
  stress case). Each length is multiplied by ``scale`` (e.g. 1/32 on a CPU: the shape is kept,
  the sizes shrink), rounded, and capped at ``seq_len``; capped documents are counted.

The lognormal parameters are our fits, not published histograms: no token-length histogram or
percentile table is published for either data set. They are derived in
docs/data.md from the LongAlign-10k dataset card and
paper (arXiv 2401.18058 §3.2–3.3: 10,000 rows of 8k–64k tokens, 655 MB for the long split) and
from the SWE-smith repository's configs and issues #71, #85, #144 (rows of 7.95k–664k
characters, training at max_seq_len 32,768); the SWE-smith fit is weakly anchored (±30 % on the
median). Truncated lognormals are drawn exactly by inverse CDF.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from greenbench.errors import SpecError

MIN_DOC_TOKENS = 2  # a document needs two tokens to hold one predicted (label) token


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """A named length distribution.

    ``draw(n, rng, seq_len)`` returns n float lengths in tokens: full-size tokens when
    ``absolute`` (then scaled by the caller), tokens at the run's own size otherwise.
    """

    name: str
    description: str
    absolute: bool
    draw: Callable[[int, np.random.Generator, int], np.ndarray]


@dataclass(frozen=True, slots=True)
class LengthSample:
    """Lengths as trained, and what they stand for.

    lengths: int64 tokens per document, each in [MIN_DOC_TOKENS, seq_len].
    represented_tokens: float64, the full-size length each document stands for (lengths / scale
        for absolute distributions, after the cap; equal to lengths for relative ones). Cost
        models are evaluated on these.
    n_truncated: documents whose scaled length exceeded seq_len and were cut to it.
    """

    lengths: np.ndarray
    represented_tokens: np.ndarray
    n_truncated: int


def _truncated_lognormal(
    mu: float, sigma: float, low: float, high: float
) -> Callable[[int, np.random.Generator, int], np.ndarray]:
    """Its draw; scipy is imported by the first draw, not by the registry, so a rank that
    draws no such lengths (a user workload's) starts without importing it."""

    @functools.cache
    def bounds() -> tuple[float, float]:
        from scipy.special import ndtr

        return float(ndtr((np.log(low) - mu) / sigma)), float(ndtr((np.log(high) - mu) / sigma))

    def draw(n: int, rng: np.random.Generator, seq_len: int) -> np.ndarray:
        from scipy.special import ndtri

        lo_p, hi_p = bounds()
        u = rng.uniform(lo_p, hi_p, size=n)
        return np.clip(np.exp(mu + sigma * ndtri(u)), low, high)

    return draw


def _log_uniform(low: float, high: float) -> Callable[[int, np.random.Generator, int], np.ndarray]:
    def draw(n: int, rng: np.random.Generator, seq_len: int) -> np.ndarray:
        return np.exp(rng.uniform(np.log(low), np.log(high), size=n))

    return draw


def _fixed(n: int, rng: np.random.Generator, seq_len: int) -> np.ndarray:
    return np.full(n, float(seq_len))


def _uniform(n: int, rng: np.random.Generator, seq_len: int) -> np.ndarray:
    low = max(MIN_DOC_TOKENS, seq_len // 8)
    return rng.integers(low, seq_len, size=n, endpoint=True).astype(np.float64)


LENGTH_DISTRIBUTIONS: dict[str, LengthDistribution] = {
    d.name: d
    for d in (
        LengthDistribution("fixed", "every document is seq_len tokens", False, _fixed),
        LengthDistribution(
            "uniform", "uniform integers on [max(2, seq_len // 8), seq_len]", False, _uniform
        ),
        LengthDistribution(
            "longalign",
            "LongAlign-10k fit: lognormal(9.350, 0.55) truncated to [7000, 58000] tokens",
            True,
            _truncated_lognormal(9.350, 0.55, 7_000, 58_000),
        ),
        LengthDistribution(
            "swe-smith",
            "SWE-smith trajectories fit: lognormal(10.309, 0.60) truncated to [2400, 200000]",
            True,
            _truncated_lognormal(10.309, 0.60, 2_400, 200_000),
        ),
        LengthDistribution(
            "longalign-loguniform",
            "stress case: log-uniform on [8000, 64000] tokens",
            True,
            _log_uniform(8_000, 64_000),
        ),
    )
}


def draw_lengths(
    name: str, n: int, rng: np.random.Generator, *, seq_len: int, scale: float
) -> LengthSample:
    """Draw ``n`` document lengths from distribution ``name``; see the module docstring.

    Args:
        name: a key of LENGTH_DISTRIBUTIONS.
        n: number of documents.
        rng: the only source of randomness (same rng state, same lengths).
        seq_len: the cap in tokens (row capacity = microbatch budget per row); also the
            reference length of the relative distributions.
        scale: factor applied to absolute (full-size) lengths before the cap, e.g. 1/32.
    """
    dist = get_distribution(name)
    if seq_len < MIN_DOC_TOKENS:
        raise SpecError(f"seq_len must be >= {MIN_DOC_TOKENS}, got {seq_len}")
    if n < 0:
        raise SpecError(f"number of documents must be >= 0, got {n}")
    if not scale > 0:
        raise SpecError(f"length scale must be > 0, got {scale}")
    raw = dist.draw(n, rng, seq_len)
    if dist.absolute:
        raw = raw * scale
    lengths = np.maximum(np.rint(raw).astype(np.int64), MIN_DOC_TOKENS)
    over = lengths > seq_len
    lengths[over] = seq_len
    represented = lengths / scale if dist.absolute else lengths.astype(np.float64)
    return LengthSample(lengths, represented, int(over.sum()))


def sample_lengths(
    name: str, n: int, rng: np.random.Generator, *, seq_len: int, scale: float
) -> np.ndarray:
    """The int64 lengths of :func:`draw_lengths` (without the truncation count)."""
    return draw_lengths(name, n, rng, seq_len=seq_len, scale=scale).lengths


def get_distribution(name: str) -> LengthDistribution:
    """The registered distribution ``name``, or SpecError listing the valid names."""
    try:
        return LENGTH_DISTRIBUTIONS[name]
    except KeyError:
        raise SpecError(
            f"unknown length distribution {name!r}; choose one of "
            f"{', '.join(sorted(LENGTH_DISTRIBUTIONS))}"
        ) from None
