"""Activation checkpointing (``train.activation_checkpointing=full``) changes memory, not
training: one process with every block checkpointed reaches the loss and gradients it reaches
without, while the saved activations it counts (`greenbench.rank.state_memory`) fall."""

from __future__ import annotations

import pytest
import torch
from helpers import TINY_DATA

from greenbench.data import DataPlan, MarkovSource
from greenbench.distributed.device import DistContext
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.rank.state_memory import StateMemory
from greenbench.sources.builtin import next_token_loss
from greenbench.strategies import STRATEGIES


def one_step(family: str, checkpoint: bool) -> tuple[float, dict[str, torch.Tensor], int]:
    """(loss, gradients, counted peak activation bytes) of one step of one process."""
    builder = ModelBuilder(FAMILIES[family], "tiny", seed=0, kernel="auto", checkpoint=checkpoint)
    ctx = DistContext(0, 0, 1, torch.device("cpu"), torch.float32)
    strategy = STRATEGIES["single"].load()(ctx)
    model = strategy.parallelize(builder)
    schedule = strategy.schedule(next_token_loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    plan = DataPlan(source=MarkovSource(vocab_size=builder.info.vocab_size, seed=1), **TINY_DATA)
    memory = StateMemory(model, optimizer)
    with memory.saving():
        loss, _ = schedule.train_step(model, optimizer, strategy.assignment.batch(plan, 0))
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss, grads, memory.read().activation_bytes


@pytest.mark.parametrize("family", ["transformer", "mamba"])
def test_checkpointed_blocks_train_the_same_and_save_less(family: str) -> None:
    loss, grads, saved = one_step(family, checkpoint=False)
    loss_ac, grads_ac, saved_ac = one_step(family, checkpoint=True)
    assert loss_ac == pytest.approx(loss, rel=1e-6)
    assert grads_ac.keys() == grads.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ac[name], grad, rtol=1e-5, atol=1e-6, msg=name)
    # the blocks' inputs stay saved (counted), everything inside a block is recomputed
    assert 0 < saved_ac < saved / 2, (saved_ac, saved)
