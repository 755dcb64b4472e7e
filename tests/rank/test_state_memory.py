"""Model-state memory counted from tensors equals the analytic numbers: parameters, gradients and
AdamW state of a known model, activations as autograd saves them (deduplicated, parameters
left out, freed as backward runs), FSDP2's local shards."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import free_port, spawn
from torch import nn

from greenbench.rank.state_memory import StateMemory, local_bytes

D, H, BATCH = 16, 64, 8


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, D))


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def step(model: nn.Module, optimizer: torch.optim.Optimizer, memory: StateMemory, rows: int):
    with memory.saving():
        model(torch.randn(rows, D)).square().sum().backward()
    optimizer.step()


def test_parameters_gradients_and_adamw_state_are_counted_exactly() -> None:
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    memory = StateMemory(model, optimizer)
    before = memory.read()
    assert before.param_bytes == n_params(model) * 4
    assert before.grad_bytes == before.optim_bytes == before.activation_bytes == 0
    step(model, optimizer, memory, BATCH)
    s = memory.read()
    tensors = len(list(model.parameters()))
    assert s.param_bytes == n_params(model) * 4
    assert s.grad_bytes == n_params(model) * 4
    # exp_avg and exp_avg_sq per parameter, and one float32 ``step`` scalar per tensor
    assert s.optim_bytes == 2 * n_params(model) * 4 + tensors * 4
    assert s.state_bytes == s.param_bytes + s.grad_bytes + s.optim_bytes + s.activation_bytes


def test_activations_are_what_autograd_saves_once_without_the_weights() -> None:
    """Linear saves its input, ReLU its output, the second Linear the same output again (one
    storage, counted once); the weights they save are parameters, not activations; the square
    saves its input (the MLP's output)."""
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    memory = StateMemory(model, optimizer)
    step(model, optimizer, memory, BATCH)
    assert memory.read().activation_bytes == BATCH * (D + H + D) * 4
    assert memory._bytes == 0  # backward freed every saved tensor


def test_activations_grow_with_the_sequence_and_the_peak_is_per_window() -> None:
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    memory = StateMemory(model, optimizer)
    step(model, optimizer, memory, BATCH)
    short = memory.read().activation_bytes
    memory.reset()
    step(model, optimizer, memory, 4 * BATCH)
    long = memory.read().activation_bytes
    assert long == 4 * short
    memory.reset()
    step(model, optimizer, memory, BATCH)
    assert memory.read().activation_bytes == short  # reset starts a new peak


def test_microbatches_in_flight_add_up() -> None:
    """Two forwards kept before their backwards (a pipeline's first stage) hold twice one
    microbatch; one after the other holds one."""
    model = mlp()
    memory = StateMemory(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    with memory.saving():
        for _ in range(2):
            model(torch.randn(BATCH, D)).sum().backward()
    one = memory.peak_activation_bytes
    memory.reset()
    with memory.saving():
        losses = [model(torch.randn(BATCH, D)).sum() for _ in range(2)]
        for loss in losses:
            loss.backward()
    assert memory.peak_activation_bytes == 2 * one
    assert memory._bytes == 0


def test_a_transformer_step_counts_the_same_as_its_parameters() -> None:
    from greenbench.models import FAMILIES, ModelBuilder

    builder = ModelBuilder(FAMILIES["transformer"], "tiny", 0, "none")
    model = builder.build(torch.device("cpu"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    memory = StateMemory(model, optimizer)
    sizes = []
    for seq in (32, 64):
        memory.reset()
        ids = torch.randint(0, builder.info.vocab_size, (1, seq))
        with memory.saving():
            model(input_ids=ids).logits.float().square().mean().backward()
        optimizer.step()
        sizes.append(memory.read().activation_bytes)
    s = memory.read()
    assert s.param_bytes == s.grad_bytes == builder.info.n_params * 4
    assert sizes[0] > 0 and 1.8 < sizes[1] / sizes[0] < 2.2  # linear in the sequence here


def test_local_bytes_counts_each_tensor_once() -> None:
    a = torch.zeros(10)
    assert local_bytes([a, a, a[:5], torch.zeros(0)]) == 40 + 20  # a view of another size counts


def _fsdp_rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        model = mlp()
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        memory = StateMemory(model, optimizer)
        step(model, optimizer, memory, BATCH)
        torch.save(memory.read(), f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_fsdp_ranks_count_their_own_shards(tmp_path: Path) -> None:
    out = str(tmp_path / "state")
    spawn(_fsdp_rank, (free_port(), out), 2)
    n = n_params(mlp())  # every dimension is even: two equal shards
    for rank in range(2):
        s = torch.load(f"{out}.{rank}", weights_only=False)
        assert s.param_bytes == s.grad_bytes == n * 4 // 2
        assert s.optim_bytes == 2 * n * 4 // 2 + 4 * 4  # four tensors' step scalars
        # FSDP's unsharded parameters are not activations: the same as one process saves
        assert s.activation_bytes == BATCH * (D + H + D) * 4
