"""Length distributions: bounds, truncation counts, and the reference file's percentiles."""

from __future__ import annotations

import numpy as np
import pytest

from greenbench.data.lengths import (
    LENGTH_DISTRIBUTIONS,
    MIN_DOC_TOKENS,
    draw_lengths,
    sample_lengths,
)
from greenbench.errors import SpecError

NO_CAP = 10**7


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(SpecError, match=r"longalign.*swe-smith"):
        sample_lengths("longalgin", 4, _rng(), seq_len=128, scale=1.0)


@pytest.mark.parametrize("name", sorted(LENGTH_DISTRIBUTIONS))
@pytest.mark.parametrize("seq_len", [2, 64, 4096])
def test_lengths_lie_in_bounds(name: str, seq_len: int) -> None:
    s = draw_lengths(name, 2000, _rng(1), seq_len=seq_len, scale=1 / 32)
    assert s.lengths.dtype == np.int64 and s.lengths.shape == (2000,)
    assert s.lengths.min() >= MIN_DOC_TOKENS and s.lengths.max() <= seq_len
    assert 0 <= s.n_truncated <= int((s.lengths == seq_len).sum())


def test_fixed_and_uniform_are_relative_to_seq_len() -> None:
    fixed = draw_lengths("fixed", 50, _rng(), seq_len=256, scale=1 / 32)
    assert (fixed.lengths == 256).all() and fixed.n_truncated == 0
    assert np.array_equal(fixed.represented_tokens, fixed.lengths)
    uni = sample_lengths("uniform", 5000, _rng(), seq_len=256, scale=1 / 32)
    assert uni.min() == 256 // 8 and uni.max() == 256


@pytest.mark.parametrize(
    ("name", "low", "high", "p50", "p90"),
    [("longalign", 7_000, 58_000, 13_000, 24_600), ("swe-smith", 2_400, 200_000, 30_000, 64_600)],
)
def test_post_training_fits_match_the_reference_percentiles(
    name: str, low: int, high: int, p50: float, p90: float
) -> None:
    # Percentiles of our derived fits (docs/data.md).
    full = sample_lengths(name, 40_000, _rng(2), seq_len=NO_CAP, scale=1.0)
    assert full.min() >= low and full.max() <= high
    assert np.median(full) == pytest.approx(p50, rel=0.02)
    assert np.percentile(full, 90) == pytest.approx(p90, rel=0.03)
    # Scaled down by 32 the shape is kept: scaled back, the median is the same.
    small = draw_lengths(name, 40_000, _rng(3), seq_len=NO_CAP, scale=1 / 32)
    assert np.median(small.lengths) * 32 == pytest.approx(p50, rel=0.02)
    assert np.array_equal(small.represented_tokens, small.lengths * 32.0)


def test_swe_smith_truncation_at_a_64k_budget() -> None:
    # The reference: about 10 % of SWE-smith rows exceed a 65,536-token microbatch.
    s = draw_lengths("swe-smith", 20_000, _rng(4), seq_len=65_536, scale=1.0)
    assert s.lengths.max() == 65_536
    assert 0.07 < s.n_truncated / 20_000 < 0.13
    scaled = draw_lengths("swe-smith", 20_000, _rng(4), seq_len=65_536 // 32, scale=1 / 32)
    assert abs(scaled.n_truncated - s.n_truncated) < 0.01 * 20_000
    assert np.array_equal(scaled.represented_tokens, scaled.lengths * 32.0)


def test_same_rng_same_lengths() -> None:
    a = sample_lengths("longalign", 100, _rng(5), seq_len=2048, scale=1 / 32)
    b = sample_lengths("longalign", 100, _rng(5), seq_len=2048, scale=1 / 32)
    c = sample_lengths("longalign", 100, _rng(6), seq_len=2048, scale=1 / 32)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize(("seq_len", "scale", "n"), [(1, 1.0, 4), (64, 0.0, 4), (64, 1.0, -1)])
def test_bad_arguments(seq_len: int, scale: float, n: int) -> None:
    with pytest.raises(SpecError):
        draw_lengths("longalign", n, _rng(), seq_len=seq_len, scale=scale)
