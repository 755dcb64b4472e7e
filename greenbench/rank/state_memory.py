"""Model-state memory per rank, counted from tensors: what the planner's memory model predicts.

A process's peak resident set (``peak_mem_bytes`` on CPU) holds far more than training state:
the Python interpreter, torch's libraries, gloo's buffers, allocator caches. The planner
(`greenbench.planner.memory`) predicts the **model state** one rank holds, so this module counts
exactly that, from the tensors themselves, in bytes:

* ``param_bytes``: the rank's parameters: every tensor of ``model.parameters()`` and of the
  strategy's optimizer parameters (`Strategy.parameters`: ODC's own shards), each counted once;
  a DTensor (FSDP2, tensor parallelism) counts its local shard only (``to_local()``);
* ``grad_bytes``: the ``.grad`` of those tensors after a step (local shards), i.e. the
  gradients the optimizer stepped; transient unsharded gradients inside backward are not held
  by any parameter and are not counted;
* ``optim_bytes``: every tensor in ``optimizer.state`` (AdamW: ``exp_avg``, ``exp_avg_sq`` and
  the scalar ``step``), local shards;
* ``activation_bytes``: the peak, over the wrapped steps, of the bytes autograd holds saved for
  backward (`torch.autograd.graph.saved_tensors_hooks`). The pack hook adds a saved tensor's
  storage once (storages are deduplicated by their data pointer: Q, K and V projections all
  saving one normed input count it once) and hands back a small handle; when autograd frees
  the saved variable (after that node's backward, or when the graph goes) the handle's
  finaliser subtracts it again. So the figure is the most saved-tensor memory alive at any
  moment of the step: one microbatch's forward for data parallelism, several microbatches in
  flight on a pipeline's first stage. Tensors whose base is a leaf that requires grad (the
  parameters, FSDP2's unsharded parameters and views of either) are parameters, not
  activations, and are skipped. Under bf16 autocast the bf16 weight copies a matmul saves are
  counted: they are real memory held until backward. A checkpointed block
  (``train.activation_checkpointing``) saves its inputs where this hook sees them
  (`greenbench.models.builder.checkpoint_blocks`); what it saves in its recomputation, during
  backward, goes to the checkpoint's own hooks and is not counted.

Counted per rank; ``state_bytes`` is the sum of the four. What is not counted: tensors a custom
autograd function keeps as attributes of ``ctx`` instead of ``save_for_backward``, temporaries
that live only inside one operator, communication buffers (FSDP2's all-gather outputs, DDP's
buckets beyond the gradients they hold), and allocator caches.

Cost: one Python call per saved tensor in forward and one finaliser per release (a few hundred
per microbatch of the tiny Transformer, microseconds each); parameters, gradients and optimizer
state are read once per measured window, after its last step. Nothing runs per operator.

Why our own: torch's ``torch.distributed._tools.mem_tracker.MemTracker`` sorts memory into the
same categories but does it with a dispatch mode that runs Python on every operator, and is a
private module; the saved-tensor hook is public and costs one call per saved tensor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

__all__ = ["StateBytes", "StateMemory", "local_bytes"]


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Model-state bytes one rank holds (module docstring)."""

    param_bytes: int
    grad_bytes: int
    optim_bytes: int
    activation_bytes: int

    @property
    def state_bytes(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optim_bytes + self.activation_bytes


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor this rank holds: a DTensor's local shard, any other tensor itself."""
    local = getattr(t, "_local_tensor", None)  # DTensor, without importing torch.distributed
    return local if isinstance(local, torch.Tensor) else t


def local_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the local parts of ``tensors``, each distinct tensor counted once (two tensors
    are the same when they start at the same address with the same size)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        local = _local(t)
        n = local.numel() * local.element_size()
        if n == 0:
            continue
        key = (local.data_ptr(), n)
        if key not in seen:
            seen.add(key)
            total += n
    return total


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield value


class _Saved:
    """What the pack hook hands autograd: the saved tensor, and its storage's share of the live
    count, given back when autograd drops this handle."""

    __slots__ = ("__weakref__", "key", "owner", "tensor")

    def __init__(self, tensor: torch.Tensor, owner: StateMemory | None, key: int) -> None:
        self.tensor = tensor
        self.owner = owner
        self.key = key

    def __del__(self) -> None:
        if self.owner is not None:
            self.owner._release(self.key)


class StateMemory:
    """Counts one rank's model state (module docstring).

    The worker makes one per rank after the optimizer exists, wraps each measured step in
    `saving`, and reads the window's figures with `read` after its last step; `reset` starts
    the next window's activation peak::

        memory = StateMemory(model, optimizer, strategy.parameters(model))
        with memory.saving():
            strategy.train_step(model, optimizer, batch)
        figures = memory.read()
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        parameters: Iterable[torch.Tensor] = (),
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.extra = list(parameters)
        self._live: dict[int, list[int]] = {}  # storage address -> [handles, bytes]
        self._bytes = 0
        self.peak_activation_bytes = 0

    def _parameters(self) -> list[torch.Tensor]:
        return [*self.model.parameters(), *self.extra]

    # ------------------------------------------------------------------ activations

    def _pack(self, tensor: torch.Tensor) -> object:
        base = tensor._base if tensor._base is not None else tensor
        if base.is_leaf and base.requires_grad:
            return _Saved(tensor, None, 0)  # a parameter (or a view of one): not an activation
        storage = _local(tensor).untyped_storage()
        key = storage.data_ptr()
        entry = self._live.get(key)
        if entry is None:
            n = storage.nbytes()
            self._live[key] = [1, n]
            self._bytes += n
            if self._bytes > self.peak_activation_bytes:
                self.peak_activation_bytes = self._bytes
        else:
            entry[0] += 1
        return _Saved(tensor, self, key)

    @staticmethod
    def _unpack(saved: object) -> torch.Tensor:
        assert isinstance(saved, _Saved)
        return saved.tensor

    def _release(self, key: int) -> None:
        entry = self._live.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            del self._live[key]
            self._bytes -= entry[1]

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """Count the tensors autograd saves for backward inside this block (one step)."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield

    def reset(self) -> None:
        """Start a new activation peak (at the start of a measured window)."""
        self.peak_activation_bytes = self._bytes

    # ------------------------------------------------------------------ reading

    def read(self) -> StateBytes:
        """Parameters, gradients and optimizer state as they are now (after a step), with the
        activation peak since the last `reset`."""
        params = self._parameters()
        grads = [p.grad for p in params if p.grad is not None]
        return StateBytes(
            param_bytes=local_bytes(params),
            grad_bytes=local_bytes(grads),
            optim_bytes=local_bytes(_optimizer_tensors(self.optimizer)),
            activation_bytes=self.peak_activation_bytes,
        )
