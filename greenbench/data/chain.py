"""An order-1 Markov chain over a vocabulary, its stationary distribution and its exact
entropy rate: the structure of greenbench's synthetic token source (`greenbench.data.markov`),
without torch, so that settings can read the floor of the loss a run can reach.

No dataset can be downloaded here, and random uniform tokens would teach a model nothing (the
loss would sit at ln V). A Markov chain whose rows are sparse (each token has ``branching``
possible successors) is learnable by any next-token model, and because we know the chain we
know the floor of the loss: the best any model can do on a stationary sequence is the chain's
entropy rate,

    H = −Σ_i π_i Σ_j P_ij ln P_ij   (nats per predicted token),

where π is the stationary distribution. Sequences start from π, so every predicted token (all
but the first of a document) has expected optimal cross-entropy exactly H.

Construction (all from ``seed``): a random permutation of the vocabulary is walked as a cycle;
each token's successors are the next two tokens on that cycle (which makes the chain
irreducible, and aperiodic because it has cycles of length V and V − 1) plus ``branching − 2``
further tokens drawn without replacement; the row's weights are Dirichlet(``concentration``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from greenbench.errors import SpecError

_STATIONARY_TOL = 1e-13  # L1 residual ‖πP − π‖ at which power iteration stops
_STATIONARY_MAX_ITERS = 200_000


class MarkovChain:
    """An order-1 Markov chain over ``vocab_size`` tokens, ``branching`` successors per token.

    Args:
        vocab_size: number of tokens V (token ids are 0 … V−1); at least 2.
        seed: seeds the chain's structure and weights (not samples drawn from it).
        branching: successors per token k, 1 ≤ k ≤ V. The entropy rate is at most ln k.
        concentration: Dirichlet concentration of each row's weights; smaller is more skewed
            (lower entropy), 1.0 is uniform on the simplex.

    Attributes (read-only numpy arrays):
        successors: (V, k) int64, successor token ids of each token.
        probs: (V, k) float64, their probabilities (rows sum to 1).
        stationary: (V,) float64, the stationary distribution π.
    """

    def __init__(
        self, vocab_size: int, seed: int, branching: int = 8, *, concentration: float = 1.0
    ) -> None:
        if vocab_size < 2:
            raise SpecError(f"MarkovSource needs vocab_size >= 2, got {vocab_size}")
        if not 1 <= branching <= vocab_size:
            raise SpecError(
                f"MarkovSource branching must be in [1, vocab_size={vocab_size}], got {branching}"
            )
        if not concentration > 0:
            raise SpecError(f"MarkovSource concentration must be > 0, got {concentration}")
        rng = np.random.default_rng(seed)
        v, k = vocab_size, branching
        perm = rng.permutation(v)
        n_forced = min(k, 2)
        # Offsets along the cycle: 1 and 2 are forced; the rest are a uniform random subset of
        # the other offsets {0, 3, 4, …, V−1} (0 is a self-loop), drawn by Floyd's algorithm
        # vectorised over rows.
        n_free, m = v - n_forced, k - n_forced
        chosen = np.empty((v, m), dtype=np.int64)
        for i, j in enumerate(range(n_free - m, n_free)):
            t = rng.integers(0, j + 1, size=v)
            dup = (chosen[:, :i] == t[:, None]).any(axis=1)
            chosen[:, i] = np.where(dup, j, t)
        free_offsets = np.where(chosen == 0, 0, chosen + n_forced)
        offsets = np.concatenate(
            [np.broadcast_to(np.arange(1, n_forced + 1), (v, n_forced)), free_offsets], axis=1
        )
        pos = np.arange(v)[:, None]
        successors = np.empty((v, k), dtype=np.int64)
        successors[perm] = perm[(pos + offsets) % v]
        probs = rng.dirichlet(np.full(k, float(concentration)), size=v)
        self._init(successors, probs)

    @classmethod
    def from_transition_matrix(cls, matrix: np.ndarray | Sequence[Sequence[float]]) -> MarkovChain:
        """A source with an explicit dense V×V transition matrix (rows must sum to 1).

        Meant for small hand-checkable chains; the chain must be irreducible (every token
        reachable from every other), otherwise its stationary distribution is not unique.
        """
        p = np.asarray(matrix, dtype=np.float64)
        if p.ndim != 2 or p.shape[0] != p.shape[1] or p.shape[0] < 2:
            raise ValueError(f"transition matrix must be square with V >= 2, got {p.shape}")
        if (p < 0).any() or not np.allclose(p.sum(axis=1), 1.0, atol=1e-12):
            raise ValueError("transition matrix rows must be non-negative and sum to 1")
        k = int((p > 0).sum(axis=1).max())
        # Non-zero entries first in each row (stable), zero-probability padding after.
        order = np.argsort(p <= 0, axis=1, kind="stable")[:, :k]
        probs = np.take_along_axis(p, order, axis=1)
        self = cls.__new__(cls)
        self._init(order.astype(np.int64), probs)
        return self

    def _init(self, successors: np.ndarray, probs: np.ndarray) -> None:
        # scipy here, not at the top: a rank that never builds a chain (a user workload's)
        # starts without importing it
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        v, k = successors.shape
        self.vocab_size = v
        self.branching = k
        probs = probs / probs.sum(axis=1, keepdims=True)
        nz = probs > 0
        graph = csr_matrix((np.ones(int(nz.sum())), (np.nonzero(nz)[0], successors[nz])), (v, v))
        n_comp, _ = connected_components(graph, directed=True, connection="strong")
        if n_comp != 1:
            raise SpecError(
                f"the Markov chain is not irreducible ({n_comp} strongly connected parts); "
                "raise concentration or branching"
            )
        cdf = np.cumsum(probs, axis=1)
        # Pin each row's CDF to exactly 1.0 from its last non-zero entry on, so that a uniform
        # u in [0, 1) never selects a zero-probability (padding) successor.
        last_nz = k - 1 - np.argmax(nz[:, ::-1], axis=1)
        cdf[np.arange(k)[None, :] >= last_nz[:, None]] = 1.0
        pi = _stationary(successors, probs)
        pi_cdf = np.cumsum(pi)
        pi_cdf[-1] = 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            row_h = -np.where(nz, probs * np.log(probs), 0.0).sum(axis=1)
            unigram = -np.where(pi > 0, pi * np.log(pi), 0.0).sum()
        self.successors = _frozen(successors)
        self.probs = _frozen(probs)
        self.stationary = _frozen(pi)
        self._cdf = _frozen(cdf)
        self._pi_cdf = _frozen(pi_cdf)
        self._entropy_rate = float(pi @ row_h)
        self._unigram_entropy = float(unigram)

    @property
    def entropy_rate_nats(self) -> float:
        """Exact entropy rate H of the chain under π: the floor of the mean next-token loss."""
        return self._entropy_rate

    @property
    def unigram_entropy_nats(self) -> float:
        """H(π): the best loss of a model that ignores context (a unigram model)."""
        return self._unigram_entropy

    def transition_matrix(self) -> np.ndarray:
        """The dense V×V transition matrix (for small V: it takes V² floats)."""
        p = np.zeros((self.vocab_size, self.vocab_size))
        np.add.at(p, (np.arange(self.vocab_size)[:, None], self.successors), self.probs)
        return p


def _stationary(successors: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """π with πP = π, by power iteration on the lazy chain (I + P)/2 (converges when periodic)."""
    v = successors.shape[0]
    flat_succ = successors.ravel()
    pi = np.full(v, 1.0 / v)
    for _ in range(_STATIONARY_MAX_ITERS):
        step = np.bincount(flat_succ, weights=(pi[:, None] * probs).ravel(), minlength=v)
        residual = np.abs(step - pi).sum()
        if residual < _STATIONARY_TOL:
            return step / step.sum()
        pi = 0.5 * (pi + step)
    raise RuntimeError(
        f"stationary distribution did not converge (L1 residual {residual:.2e}); "
        "the chain mixes too slowly for power iteration"
    )


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a
