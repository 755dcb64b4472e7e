"""A layout becomes a DeviceMesh with named dimensions: 2 × 2 on four real gloo ranks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import free_port, spawn

from greenbench.rank.mesh import build_mesh
from greenbench.vocabulary import Layout

pytestmark = pytest.mark.slow


def _rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = build_mesh(Layout(dp_shard=2, tp=2), "cpu")
        assert mesh is not None
        facts = {
            "names": mesh.mesh_dim_names,
            "shape": tuple(mesh.shape),
            # the global ranks this rank shares each dimension's group with
            "dp_shard": sorted(dist.get_process_group_ranks(mesh.get_group("dp_shard"))),
            "tp": sorted(dist.get_process_group_ranks(mesh.get_group("tp"))),
        }
        # the groups work: an all-reduce over tp sums the two tp ranks only
        x = torch.tensor([float(rank)])
        dist.all_reduce(x, group=mesh.get_group("tp"))
        facts["tp_sum"] = x.item()
        torch.save(facts, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_a_two_by_two_layout_on_four_ranks(tmp_path: Path):
    out = str(tmp_path / "mesh")
    spawn(_rank, (4, free_port(), out), 4)
    facts = [torch.load(f"{out}.{r}") for r in range(4)]
    for rank, f in enumerate(facts):
        assert f["names"] == ("dp_shard", "tp") and f["shape"] == (2, 2)
        # tp is the inner dimension: adjacent ranks share a tensor-parallel group
        assert f["tp"] == [rank - rank % 2, rank - rank % 2 + 1]
        assert f["dp_shard"] == [rank % 2, rank % 2 + 2]
        assert f["tp_sum"] == sum(f["tp"])


def test_a_one_rank_layout_has_no_mesh():
    assert build_mesh(Layout(), "cpu") is None
