"""A model cut into ODC's units: each block, and the root (everything outside the blocks).

A unit's parameters live in one flat fp32 tensor of ``world × shard`` elements (padded), a leaf
that autograd accumulates into; the module's own attributes become views of it, re-made at each
forward so the graph leads back to the flat tensor. The flat tensor's storage is allocated only
while the unit computes (`Unit.materialize`, filled from the shards' owners) and released after
(`Unit.release`), as FSDP does: a rank holds its shards plus only the units it is computing.
Refilling a released unit before its backward writes through ``.data`` into the same storage, so
the views autograd saved in forward read the refilled values and no version check trips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass(slots=True)
class Unit:
    """One unit of a model sharded over ``world`` ranks."""

    index: int
    module: torch.nn.Module
    names: list[str]  # the parameters' names in the whole model
    slots: list[tuple[torch.nn.Module, str, torch.Size, int, int]]  # module, attr, shape, at, n
    numel: int
    shard: int  # elements per rank's shard (numel padded up to a multiple of world)
    world: int
    flat: torch.Tensor = field(default_factory=lambda: torch.zeros(0))

    @property
    def padded(self) -> int:
        return self.shard * self.world

    @property
    def materialized(self) -> bool:
        """Whether the flat tensor has its storage (the unit's full parameters are here)."""
        return self.flat.untyped_storage().size() > 0

    def shard_of(self, tensor: torch.Tensor, owner: int) -> torch.Tensor:
        return tensor[owner * self.shard : (owner + 1) * self.shard]

    def allocate(self) -> None:
        """Give the flat tensor its storage back (contents undefined until filled)."""
        storage = self.flat.untyped_storage()
        if storage.size() == 0:
            storage.resize_(self.padded * self.flat.element_size())

    def release(self) -> None:
        """Free the flat tensor's storage (its views stay, pointing at nothing)."""
        self.flat.untyped_storage().resize_(0)

    def use_views(self) -> None:
        """Point the module's parameter attributes at the flat tensor (autograd records it)."""
        for module, attr, shape, at, n in self.slots:
            setattr(module, attr, self.flat[at : at + n].view(shape))


def cut_units(model: torch.nn.Module, blocks: list[torch.nn.Module], world: int) -> list[Unit]:
    """The model's units, root first then blocks in order, with their parameters turned into
    plain attributes (the caller fills and owns the values from here on).

    Returns each unit with its flat tensor holding the full initial values (allocated)."""
    in_block = {id(p) for b in blocks for p in b.parameters()}
    names = {id(p): name for name, p in model.named_parameters()}
    device = next(model.parameters()).device
    units = []
    for index, module in enumerate([model, *blocks]):
        slots: list[tuple[torch.nn.Module, str, torch.Size, int, int]] = []
        values, unit_names = [], []
        at = 0
        for mod in module.modules():
            for attr, p in list(mod._parameters.items()):
                if p is None or (index == 0 and id(p) in in_block):
                    continue
                slots.append((mod, attr, p.shape, at, p.numel()))
                values.append(p.detach().reshape(-1))
                unit_names.append(names[id(p)])
                at += p.numel()
        shard = max(1, math.ceil(at / world))
        flat = torch.zeros(shard * world, dtype=torch.float32, device=device)
        flat[:at] = torch.cat(values).float() if values else flat[:0]
        flat.requires_grad_(True)
        for mod, attr, *_ in slots:
            del mod._parameters[attr]
        unit = Unit(index, module, unit_names, slots, at, shard, world, flat)
        unit.use_views()
        units.append(unit)
    return units
