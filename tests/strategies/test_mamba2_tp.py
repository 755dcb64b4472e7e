"""Mamba-2's tensor-parallel split by whole groups computes what one process computes.

The ``tiny`` shape built with two groups of B and C (no preset has more than one; the split
needs tp to divide them): two real gloo ranks, each block split over a tp mesh of 2 with the
hybrid strategy's recorded collectives, run the same rows as one process; the loss and every
parameter's gradient (gathered, and ``in_proj``'s and the conv's rows put back in the model's
order) must match. Float32; rtol 1e-4, atol 1e-5 (the all-reduce sums the heads' halves of
``out_proj`` in another order). A model whose groups tp does not divide is refused.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import free_port, spawn
from transformers import Mamba2ForCausalLM

from greenbench.distributed.comm import CommRecorder
from greenbench.errors import SpecError
from greenbench.models.mamba2.model import make_config, use_ssd_scan
from greenbench.models.mamba2.parallel import _row_parts, shard_block, unshard_rows

VOCAB, ROWS, SEQ, GROUPS = 128, 2, 24, 2


def make_model(groups: int = GROUPS) -> torch.nn.Module:
    config = make_config("tiny", vocab_size=VOCAB)
    config.n_groups = groups
    config.num_hidden_layers = 2
    config.chunk_size = 8  # several chunks of the scan in the rows
    torch.manual_seed(0)
    return use_ssd_scan(Mamba2ForCausalLM(config), "torch")


def batch() -> torch.Tensor:
    return torch.randint(1, VOCAB, (ROWS, SEQ), generator=torch.Generator().manual_seed(1))


def loss_of(model: torch.nn.Module) -> torch.Tensor:
    ids = batch()
    logits = model(input_ids=ids).logits
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


def _worker(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from greenbench.strategies.hybrid.tp import TpOps

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        comm = CommRecorder()
        ops = TpOps(mesh.get_group(), comm)
        model = make_model()
        for block in model.backbone.layers:
            shard_block(block, mesh, ops)
        loss = loss_of(model)
        loss.backward()
        grads = {}
        for name, p in model.named_parameters():
            grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            leaf = name.split("mixer.")[-1]
            if leaf in ("in_proj.weight", "conv1d.weight", "conv1d.bias"):
                mixer = model.get_submodule(name.rsplit(".", 2)[0])
                grad = unshard_rows(grad, _row_parts(mixer, leaf), world)
            grads[name] = grad.detach().clone()
        calls = [(c.dim, c.op) for c in comm.take()]
        if rank == 0:
            torch.save({"loss": loss.detach(), "grads": grads, "calls": calls}, out)
    finally:
        dist.destroy_process_group()


def test_tp2_with_two_groups_matches_one_process():
    out = Path(tempfile.mkdtemp()) / "result.pt"
    spawn(_worker, (2, free_port(), str(out)), 2)
    got = torch.load(out)
    model = make_model()
    want = loss_of(model)
    want.backward()
    torch.testing.assert_close(got["loss"], want.detach(), rtol=1e-5, atol=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(got["grads"][name], p.grad, rtol=1e-4, atol=1e-5, msg=name)
    # per layer: out_proj's output forward, the mixer input's gradient backward
    assert got["calls"] == [("tp", "all_reduce")] * 4


def test_a_split_that_would_cut_a_group_is_refused():
    class Mesh:
        def size(self) -> int:
            return 2

    block = make_model(groups=1).backbone.layers[0]
    with pytest.raises(SpecError, match="does not divide the mixer's 1 SSM groups"):
        shard_block(block, Mesh(), None)
