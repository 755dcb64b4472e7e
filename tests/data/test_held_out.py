"""The held-out set of a run to a target (`DataPlan.held_out`): the same documents at every
step, from a stream no training step draws, shared by ranks without loss or overlap; and the
chain's seed (``data.chain_seed``) fixes the data's floor whatever the run's seed."""

from __future__ import annotations

import torch

from greenbench.data import DataPlan
from greenbench.settings import DEFAULTS, SCHEMA


def plan_of(**settings: object) -> DataPlan:
    config = SCHEMA.config({**DEFAULTS, "data.balance": "same-count", **settings})
    return DataPlan.from_section(config.data, seed=config.run.seed, vocab_size=256)


def rows(batch) -> list[tuple[int, ...]]:
    return [tuple(int(t) for t in row) for mb in batch.microbatches for row in mb.input_ids]


def test_the_held_out_set_is_fixed_shared_whole_and_never_trained_on():
    plan = plan_of(**{"data.seq_len": 32, "data.global_batch": 8, "data.micro_batch": 2})
    held = plan.held_out(8)
    whole = held.part(0, 0, 1)
    assert rows(held.part(7, 0, 1)) == rows(whole)  # every evaluation the same documents
    halves = [held.part(0, i, 2) for i in range(2)]
    assert sorted(rows(halves[0]) + rows(halves[1])) == sorted(rows(whole))
    assert halves[0].global_tokens == whole.global_tokens == whole.n_tokens
    trained = {r for step in range(50) for r in rows(plan.part(step, 0, 1))}
    assert not trained & set(rows(whole))


def test_a_fixed_chain_keeps_its_floor_across_run_seeds():
    a = plan_of(seed=0, **{"data.chain_seed": 3})
    b = plan_of(seed=1, **{"data.chain_seed": 3})
    c = plan_of(seed=1)  # -1: the chain follows the run's seed, as before the setting
    assert a.source.entropy_rate_nats == b.source.entropy_rate_nats
    assert torch.equal(torch.as_tensor(a.source.probs), torch.as_tensor(b.source.probs))
    assert c.source.entropy_rate_nats != a.source.entropy_rate_nats
    assert rows(a.part(0, 0, 1)) != rows(b.part(0, 0, 1))  # other samples, same chain
