"""A seeded, learnable synthetic token source: the Markov chain of `greenbench.data.chain`,
sampled.

Sampling is inverse-CDF over precomputed cumulative rows. A Markov chain is sequential in time,
so speed comes from running many independent sequences (documents) as parallel lanes with
numpy, one vectorised step per position; lanes are sorted by length so that finished documents
drop out. We wrote this rather than use a library because none gives a sparse, seeded chain
with an exact entropy rate and parallel-lane sampling driven by a ``torch.Generator``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from greenbench.data.chain import MarkovChain


class MarkovSource(MarkovChain):
    """A `MarkovChain` that samples stationary sequences (documents) with a torch generator:
    sequences start from π, so every predicted token (all but a document's first) has expected
    optimal cross-entropy exactly the chain's entropy rate."""

    def sample(self, length: int, generator: torch.Generator) -> torch.Tensor:
        """One stationary sequence of ``length`` tokens, as a (length,) LongTensor.

        One sequence is inherently sequential; for throughput draw many at once with
        :meth:`sample_batch` or :meth:`sample_documents`.
        """
        return self.sample_documents([length], generator)[0]

    def sample_batch(self, n: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` independent stationary sequences of ``length`` tokens: an (n, length) tensor."""
        if n < 0 or length < 0:
            raise ValueError(f"n and length must be >= 0, got n={n}, length={length}")
        tokens = self._walk(np.full(n, length, dtype=np.int64), generator)
        return torch.from_numpy(np.ascontiguousarray(tokens.T))

    def sample_documents(
        self, lengths: Sequence[int] | np.ndarray, generator: torch.Generator
    ) -> list[torch.Tensor]:
        """Independent stationary sequences, one per entry of ``lengths``, in that order.

        All documents advance together (one vectorised step per position), so the cost is
        max(lengths) numpy steps over at most len(lengths) lanes. The tokens depend on the
        generator's state and on the whole ``lengths`` vector (its order included).
        """
        lens = np.asarray(lengths, dtype=np.int64)
        if lens.ndim != 1 or (lens < 0).any():
            raise ValueError("lengths must be a 1-D sequence of non-negative ints")
        order = np.argsort(-lens, kind="stable")
        tokens = self._walk(lens[order], generator)
        out: list[torch.Tensor] = [torch.empty(0, dtype=torch.long)] * len(lens)
        for lane, doc in enumerate(order):
            out[doc] = torch.from_numpy(tokens[: lens[doc], lane].copy())
        return out

    def _walk(self, lens_desc: np.ndarray, generator: torch.Generator) -> np.ndarray:
        """Run one lane per length (lengths sorted descending); returns (max_len, lanes) tokens."""
        n = len(lens_desc)
        max_len = int(lens_desc[0]) if n else 0
        out = np.zeros((max_len, n), dtype=np.int64)
        if max_len == 0:
            return out
        u = torch.rand((max_len, n), generator=generator, dtype=torch.float64).numpy()
        # active[t] = lanes still running at position t (a prefix, lengths being sorted).
        active = np.searchsorted(-lens_desc, -np.arange(max_len), side="left")
        state = np.searchsorted(self._pi_cdf, u[0, : active[0]], side="right")
        out[0, : active[0]] = state
        cdf, succ = self._cdf, self.successors
        for t in range(1, max_len):
            a = active[t]
            state = state[:a]
            j = (cdf[state] <= u[t, :a, None]).sum(axis=1)
            state = succ[state, j]
            out[t, :a] = state
        return out
