"""MarkovSource: exact entropy rate and stationary law, and samples that follow the chain."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from greenbench.data.markov import MarkovSource
from greenbench.errors import SpecError


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_two_state_chain_by_hand() -> None:
    # P = [[0.9, 0.1], [0.5, 0.5]]: balance 0.1·π0 = 0.5·π1 gives π = (5/6, 1/6).
    src = MarkovSource.from_transition_matrix([[0.9, 0.1], [0.5, 0.5]])
    h0 = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    h1 = math.log(2.0)
    assert src.stationary == pytest.approx([5 / 6, 1 / 6], abs=1e-12)
    assert src.entropy_rate_nats == pytest.approx(5 / 6 * h0 + 1 / 6 * h1, abs=1e-12)
    unigram = -(5 / 6 * math.log(5 / 6) + 1 / 6 * math.log(1 / 6))
    assert src.unigram_entropy_nats == pytest.approx(unigram, abs=1e-12)


def test_periodic_cycle_has_zero_entropy_and_uniform_law() -> None:
    src = MarkovSource.from_transition_matrix([[0, 1, 0], [0, 0, 1], [1, 0, 0]])
    assert src.entropy_rate_nats == pytest.approx(0.0, abs=1e-15)
    assert src.stationary == pytest.approx([1 / 3] * 3, abs=1e-12)
    seq = src.sample(7, _gen()).tolist()
    assert all((b - a) % 3 == 1 for a, b in itertools.pairwise(seq))


def test_reducible_chain_is_rejected() -> None:
    with pytest.raises(SpecError, match="irreducible"):
        MarkovSource.from_transition_matrix([[1.0, 0.0], [0.5, 0.5]])


@pytest.mark.parametrize(("vocab", "branching"), [(2, 1), (2, 2), (3, 3), (50, 8), (1000, 4)])
def test_generated_chain_structure(vocab: int, branching: int) -> None:
    src = MarkovSource(vocab, seed=7, branching=branching)
    assert src.successors.shape == src.probs.shape == (vocab, branching)
    assert np.allclose(src.probs.sum(axis=1), 1.0)
    for row in src.successors:
        assert len(set(row.tolist())) == branching
    p = src.transition_matrix()
    assert np.abs(src.stationary @ p - src.stationary).sum() < 1e-10
    assert 0.0 <= src.entropy_rate_nats <= math.log(branching) + 1e-12
    assert src.entropy_rate_nats <= src.unigram_entropy_nats + 1e-12
    assert src.unigram_entropy_nats <= math.log(vocab) + 1e-12


def test_chain_is_a_function_of_its_seed() -> None:
    a, b, c = MarkovSource(64, 3), MarkovSource(64, 3), MarkovSource(64, 4)
    assert np.array_equal(a.successors, b.successors) and np.array_equal(a.probs, b.probs)
    assert not np.array_equal(a.successors, c.successors)


def test_empirical_transitions_match_the_chain() -> None:
    src = MarkovSource(6, seed=1, branching=3)
    p = src.transition_matrix()
    x = src.sample_batch(200, 600, _gen(1)).numpy()
    counts = np.zeros((6, 6))
    np.add.at(counts, (x[:, :-1].ravel(), x[:, 1:].ravel()), 1)
    assert counts[p == 0].sum() == 0  # never leaves the chain's support
    visits = counts.sum(axis=1, keepdims=True)
    freq = counts / visits
    sd = np.sqrt(p * (1 - p) / visits)
    assert (np.abs(freq - p) <= 5 * sd + 1e-12).all()
    # The true per-token loss −ln P(x_t+1 | x_t) averages to the entropy rate.
    nll = -np.log(p[x[:, :-1], x[:, 1:]])
    assert nll.mean() == pytest.approx(src.entropy_rate_nats, abs=5 * nll.std() / nll.size**0.5)


def test_documents_start_from_the_stationary_law() -> None:
    src = MarkovSource(5, seed=2, branching=2)
    firsts = np.array([d[0].item() for d in src.sample_documents([3] * 4000, _gen(2))])
    freq = np.bincount(firsts, minlength=5) / len(firsts)
    pi = src.stationary
    assert (np.abs(freq - pi) <= 5 * np.sqrt(pi * (1 - pi) / len(firsts))).all()


def test_sample_documents_shapes_order_and_determinism() -> None:
    src = MarkovSource(100, seed=0)
    lengths = [5, 0, 17, 1, 17, 3]
    docs = src.sample_documents(lengths, _gen(9))
    assert [len(d) for d in docs] == lengths
    assert all(d.dtype == torch.long for d in docs)
    again = src.sample_documents(lengths, _gen(9))
    assert all(torch.equal(a, b) for a, b in zip(docs, again, strict=True))
    other = src.sample_documents(lengths, _gen(10))
    assert not all(torch.equal(a, b) for a, b in zip(docs, other, strict=True))
    for d in docs:  # every transition inside a document is one of the chain's
        for a, b in itertools.pairwise(d.tolist()):
            assert b in src.successors[a]
    assert src.sample_batch(3, 4, _gen()).shape == (3, 4)
    assert src.sample(0, _gen()).shape == (0,)


@pytest.mark.parametrize(
    ("vocab", "branching", "concentration"), [(1, 1, 1.0), (10, 0, 1.0), (10, 11, 1.0), (10, 2, 0)]
)
def test_bad_arguments(vocab: int, branching: int, concentration: float) -> None:
    with pytest.raises(SpecError):
        MarkovSource(vocab, 0, branching, concentration=concentration)
