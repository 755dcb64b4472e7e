"""The one place a layout becomes a ``DeviceMesh``: one named dimension per degree above 1,
outermost first (``pp``, ``dp_replicate``, ``dp_shard``, ``cp``, ``tp``, as torchtitan orders
them), so ranks that share a tensor-parallel group are adjacent (on one node first)."""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from greenbench.vocabulary import Layout


def build_mesh(layout: Layout, device_type: str) -> DeviceMesh | None:
    """The mesh of ``layout`` over the initialised default process group, or None for a
    one-rank layout (nothing to communicate)."""
    dims = layout.mesh_dims()
    if not dims:
        return None
    names = tuple(name for name, _ in dims)
    shape = tuple(size for _, size in dims)
    return init_device_mesh(device_type, shape, mesh_dim_names=names)
