"""The window's accounting: analytic FLOPs of a batch, and blocked time split into transfer
and waiting."""

from __future__ import annotations

import pytest
import torch

from greenbench.data.batches import StepBatch, collate_microbatch
from greenbench.distributed.device import StepTimes
from greenbench.rank.window import WindowTally, split_blocked


def test_the_last_rank_to_arrive_waits_for_no_one():
    # call 0: rank 1 arrived last (0.1 s); call 1: rank 0 arrived last (0.2 s)
    per_rank = [[0.5, 0.2], [0.1, 0.6]]
    (c0, w0), (c1, w1) = split_blocked(per_rank)
    assert c0 == pytest.approx(0.3) and c1 == pytest.approx(0.3)
    assert w0 == pytest.approx(0.4) and w1 == pytest.approx(0.4)
    for (c, w), times in zip([(c0, w0), (c1, w1)], per_rank, strict=True):
        assert c + w == pytest.approx(sum(times))  # nothing lost, nothing invented


def test_balanced_ranks_have_no_waiting():
    assert split_blocked([[0.2, 0.3], [0.2, 0.3]]) == [(0.5, 0.0), (0.5, 0.0)]


def test_mismatched_sequences_count_as_transfer_and_empty_inputs():
    assert split_blocked([[0.2, 0.3], [0.4]]) == [(0.5, 0.0), (0.4, 0.0)]
    assert split_blocked([]) == []
    assert split_blocked([[], []]) == [(0.0, 0.0), (0.0, 0.0)]


def test_the_tally_sums_both_flop_conventions_and_an_unknown_causal_count_stays_unknown():
    mb = collate_microbatch([[torch.arange(1, 9)]])
    batch = StepBatch(microbatches=(mb,), global_tokens=mb.n_tokens, cost=0.0)
    tally = WindowTally()
    tally.add(0.1, StepTimes(), 1.0, batch, 10.0, 6.0)
    tally.add(0.1, StepTimes(), 1.0, batch, 10.0, 7.0)
    tally.add(0.1, StepTimes(), 1.0, batch, 10.0, 99.0, counted=False)  # another rank's tokens
    assert (tally.flops, tally.flops_causal) == (20.0, 13.0)
    tally.add(0.1, StepTimes(), 1.0, batch, 10.0, None)  # a step whose causal count is unknown
    tally.add(0.1, StepTimes(), 1.0, batch, 10.0, 6.0)
    assert (tally.flops, tally.flops_causal) == (40.0, None)  # never a partial sum
