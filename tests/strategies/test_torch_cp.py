"""PyTorch's ``context_parallel`` (CUDA SDPA) computes what one process computes, and the card
chooses it only where it applies.

The choice (`ModelCard.cp_form`) is checked everywhere. The CUDA path is marked ``cuda``: it
needs NCCL ranks on GPUs. With one GPU it runs one rank (world size 1, cp = 1): the model goes
through the whole path — the ``greenbench_torch_cp`` attention function, torch's
``_ContextParallel`` hooks making q, k, v DTensors on the cp mesh, the CP dispatcher routing
CUDA SDPA (forward and backward) to its ring version, load balancing on, our zigzag split of
the rows — with a ring of one rank, which checks the plumbing, not the exchange. With two GPUs
it also runs cp = 2, the ring proper. NCCL refuses two ranks on one GPU, and gloo cannot carry
the ring's CUDA collectives, so one GPU cannot test more. The reference runs on the CPU, float32
(tolerances allow for the GPU's kernels summing in other orders).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import free_port

from greenbench.models import build_model
from greenbench.models import family as model_family

VOCAB = 128
SEQ = 64
ROWS = 2


def test_the_card_takes_torch_context_parallel_only_for_unpacked_cuda_rows():
    card = model_family("transformer")
    assert card.cp_form("cuda", packed=False).kind == "torch"
    assert card.cp_form("cuda", packed=False).layout == "zigzag"
    packed = card.cp_form("cuda", packed=True)
    assert (packed.kind, packed.layout) == ("own", "zigzag")
    assert "packed rows: context_parallel needs is_causal without a mask" in packed.note
    cpu = card.cp_form("cpu", packed=False)
    assert (cpu.kind, cpu.layout) == ("own", "zigzag") and "CPU" in cpu.note
    mamba = model_family("mamba").cp_form("cuda", packed=False)
    assert (mamba.kind, mamba.layout) == ("own", "contiguous")


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (ROWS, SEQ), generator=gen)
    return ids, ids.clone(), torch.arange(SEQ).expand(ROWS, SEQ).contiguous()


def reference() -> dict[str, torch.Tensor]:
    model = build_model("transformer", "tiny", seed=0, vocab_size=VOCAB)
    ids, labels, pos = batch()
    logits = model(input_ids=ids, position_ids=pos).logits
    loss = F.cross_entropy(
        logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100, reduction="sum"
    )
    (loss / (ROWS * (SEQ - 1))).backward()
    out = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    out["loss"] = loss.detach()
    return out


def _worker(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from greenbench.distributed.comm import CommRecorder
    from greenbench.distributed.context_parallel import split_sequence

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
        device = torch.device("cuda", rank)
        model = build_model("transformer", "tiny", seed=0, vocab_size=VOCAB).to(device)
        card = model_family("transformer")
        form = card.cp_form("cuda", packed=False)
        assert form.kind == "torch"
        card.enable_context_parallel(
            model, mesh["cp"].get_group(), CommRecorder(), form=form, mesh=mesh["cp"]
        )
        ids, labels, pos = (
            t.to(device) for t in split_sequence(*batch(), rank, world, form.layout)
        )
        logits = model(input_ids=ids, position_ids=pos).logits
        loss = F.cross_entropy(
            logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="sum"
        )
        (loss / (ROWS * (SEQ - 1))).backward()
        result = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
        result["loss"] = loss.detach().clone()
        for tensor in result.values():
            dist.all_reduce(tensor)
        if rank == 0:
            torch.save({k: v.cpu() for k, v in result.items()}, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.cuda
@pytest.mark.parametrize("world", [1, 2])
def test_torch_context_parallel_matches_one_process(world: int):
    if torch.cuda.device_count() < world:
        pytest.skip(f"cp={world} needs {world} GPUs (NCCL takes one rank per GPU)")
    import torch.multiprocessing as mp

    out = Path(tempfile.mkdtemp()) / "result.pt"
    mp.start_processes(  # spawned, not forked: the ranks use CUDA
        _worker, args=(world, free_port(), str(out)), nprocs=world, start_method="spawn"
    )
    got, want = torch.load(out), reference()
    torch.testing.assert_close(got["loss"], want["loss"], rtol=1e-4, atol=1e-4)
    for name, grad in want.items():
        if name != "loss":
            torch.testing.assert_close(got[name], grad, rtol=1e-3, atol=1e-4, msg=name)
