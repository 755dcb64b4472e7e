"""The Llama-style Transformer trains: a few steps on one repeated batch lower its loss."""

from __future__ import annotations

import torch

from greenbench.models import build_model


def test_training_steps_decrease_loss_on_a_repeated_batch():
    model = build_model("transformer", "tiny", seed=0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (2, 64), generator=g)
    labels = ids.clone()
    labels[1, 48:] = -100  # padding is ignored by the loss
    positions = torch.cat([torch.arange(32), torch.arange(32)]).repeat(2, 1)  # two packed docs
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(4):
        loss = model(input_ids=ids, labels=labels, position_ids=positions).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1, losses
