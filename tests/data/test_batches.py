"""make_step_batches: tensor layout, determinism, and the same documents for any world size."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
import torch

from greenbench.data.batches import (
    IGNORE_INDEX,
    Microbatch,
    StepBatch,
    collate_microbatch,
    make_step_batches,
)
from greenbench.data.markov import MarkovSource
from greenbench.errors import SpecError

SOURCE = MarkovSource(97, seed=5)


def _t(*xs: int) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.long)


def _batches(**over: Any) -> list[StepBatch]:
    kw: dict[str, Any] = {
        "source": SOURCE,
        "lengths": "longalign",
        "seq_len": 512,
        "global_batch": 12,
        "micro_batch": 2,
        "world_size": 2,
        "mode": "balanced-cost",
        "cost_model": "7b",
        "scale": 1 / 64,
        "seed": 3,
    }
    kw.update(over)
    return make_step_batches(kw.pop("step", 0), **kw)


def _documents(mb: Microbatch) -> list[tuple[int, ...]]:
    docs = []
    for r, row in enumerate(mb.doc_lengths):
        at = 0
        for n in row:
            docs.append(tuple(mb.input_ids[r, at : at + n].tolist()))
            at += n
    return docs


def test_collate_by_hand() -> None:
    mb = collate_microbatch([[_t(5, 6, 7), _t(8, 9)], [_t(1, 2, 3, 4)]])
    x = IGNORE_INDEX
    assert mb.input_ids.tolist() == [[5, 6, 7, 8, 9], [1, 2, 3, 4, 0]]
    assert mb.labels.tolist() == [[x, 6, 7, x, 9], [x, 2, 3, 4, x]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 0, 1], [0, 1, 2, 3, 0]]
    assert mb.n_tokens == 6 and mb.n_sequences == 3
    assert mb.doc_lengths == ((3, 2), (4,))
    with pytest.raises(ValueError):
        collate_microbatch([])


@pytest.mark.parametrize("mode", ["same-count", "balanced-cost"])
@pytest.mark.parametrize("lengths", ["uniform", "longalign", "swe-smith"])
def test_microbatches_are_consistent(mode: str, lengths: str) -> None:
    batches = _batches(mode=mode, lengths=lengths, world_size=3)
    assert len(batches) == 3
    assert len({b.global_tokens for b in batches}) == 1
    assert sum(b.n_tokens for b in batches) == batches[0].global_tokens
    if mode == "same-count":
        assert len({len(b.microbatches) for b in batches}) == 1
    for b in batches:
        assert b.cost == pytest.approx(sum(b.microbatch_costs))
        for mb in b.microbatches:
            rows, width = mb.input_ids.shape
            assert rows <= 2 and width <= 512
            assert width == max(sum(r) for r in mb.doc_lengths)
            assert mb.labels.shape == mb.position_ids.shape == mb.input_ids.shape
            assert mb.n_tokens == int((mb.labels != IGNORE_INDEX).sum())
            real = mb.labels != IGNORE_INDEX
            assert torch.equal(mb.labels[real], mb.input_ids[real])
            assert mb.n_sequences == sum(len(r) for r in mb.doc_lengths)
            assert int((mb.position_ids == 0).sum()) >= mb.n_sequences


def test_fixed_lengths_give_full_blocks() -> None:
    for world, mode in itertools.product((1, 2, 4), ("same-count", "balanced-cost")):
        batches = _batches(
            lengths="fixed", seq_len=64, global_batch=16, micro_batch=2, world_size=world, mode=mode
        )
        for b in batches:
            assert len(b.microbatches) == 16 // (2 * world)
            for mb in b.microbatches:
                assert mb.input_ids.shape == (2, 64)
                assert (mb.labels[:, 0] == IGNORE_INDEX).all()
                assert (mb.labels[:, 1:] != IGNORE_INDEX).all()
                assert torch.equal(mb.position_ids, torch.arange(64).expand(2, 64))
                assert mb.n_tokens == 2 * 63


def test_deterministic_in_seed_and_step() -> None:
    a, b = _batches(step=4), _batches(step=4)
    for x, y in zip(a, b, strict=True):
        assert x.cost == y.cost and len(x.microbatches) == len(y.microbatches)
        for m, n in zip(x.microbatches, y.microbatches, strict=True):
            assert torch.equal(m.input_ids, n.input_ids) and torch.equal(m.labels, n.labels)
            assert torch.equal(m.position_ids, n.position_ids)
    tokens = {
        key: [_documents(mb) for sb in _batches(**kw) for mb in sb.microbatches]
        for key, kw in {
            "base": {"step": 4},
            "step": {"step": 5},
            "seed": {"step": 4, "seed": 4},
        }.items()
    }
    assert tokens["base"] != tokens["step"] and tokens["base"] != tokens["seed"]


@pytest.mark.parametrize("lengths", ["longalign", "uniform"])
def test_same_documents_for_every_world_size_and_mode(lengths: str) -> None:
    reference = None
    for world, mode in itertools.product((1, 2, 3, 4, 6), ("same-count", "balanced-cost")):
        batches = _batches(lengths=lengths, world_size=world, mode=mode, step=2)
        docs = Counter(d for b in batches for mb in b.microbatches for d in _documents(mb))
        assert sum(docs.values()) == 12
        if reference is None:
            reference = docs
        assert docs == reference, f"world_size={world} mode={mode} changed the documents"


def test_documents_are_chain_samples() -> None:
    for b in _batches(lengths="swe-smith"):
        for mb in b.microbatches:
            for doc in _documents(mb):
                assert len(doc) >= 2
                assert all(y in SOURCE.successors[x] for x, y in itertools.pairwise(doc))


def test_truncation_is_reported() -> None:
    batches = _batches(lengths="swe-smith", seq_len=256, scale=1 / 32)
    # swe-smith's median is 30k tokens, 937 at 1/32: nearly all of them exceed 256.
    assert batches[0].n_truncated >= 9
    assert all(b.n_truncated == batches[0].n_truncated for b in batches)


@pytest.mark.parametrize(
    "over",
    [
        {"cost_model": "13b"},
        {"mode": "odc"},
        {"lengths": "pile"},
        {"micro_batch": 0},
        {"global_batch": 12, "world_size": 5, "mode": "same-count"},
        {"step": -1},
    ],
)
def test_bad_arguments(over: dict[str, Any]) -> None:
    with pytest.raises(SpecError):
        _batches(**over)
