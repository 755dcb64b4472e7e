"""Tensor parallelism for the hybrid layouts, with every collective in the communication records.

The Transformer is split with torch's ``parallelize_module`` and its family's plan (column-wise
q/k/v/gate/up, row-wise o/down). Two styles record what the stock ones do unrecorded:

* `RecordedRowwise`: the row-wise output's partial sums are all-reduced synchronously inside a
  recorded span (the stock style issues it asynchronously; on CPU gloo nothing overlaps it
  either way, on CUDA the span's events bracket it on the compute stream);
* `ReplicatedInput`, put on each module whose input the column-wise projections share (the
  family's ``inputs``: attention and MLP): the input becomes a replicated DTensor once, so the
  projections' partial input gradients add up before one all-reduce, which two autograd marks
  around the conversion time in backward (the stock styles convert per projection: three
  all-reduces for q, k and v).

A family without a plan of projections (Mamba) shards its blocks itself and calls `TpOps`
(`copy`: identity forward, all-reduce backward; `reduce`: all-reduce forward, identity
backward), recorded the same way. All records are on the mesh dimension ``tp``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.models import ModelCard

DIM = "tp"


def _settled(t: torch.Tensor) -> torch.Tensor:
    """A functional collective's result, waited for (so its time is inside the span)."""
    wait = getattr(t, "wait", None)
    return wait() if callable(wait) and not isinstance(t, DTensor) else t


class _OpenSpan:
    """A recorded span opened in one autograd node's backward and closed in another's."""

    def __init__(self, comm: CommRecorder) -> None:
        self.comm = comm
        self.ctx: Any = None

    def open(self, nbytes: int) -> None:
        self.ctx = self.comm.span(DIM, "all_reduce", nbytes)
        self.ctx.__enter__()

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(None, None, None)
            self.ctx = None


class _SpanMark(torch.autograd.Function):
    """Identity; its backward opens the span (where the gradient arrives as partial sums) or
    closes it (once the all-reduced gradient is ready)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, span: _OpenSpan, opens: bool) -> torch.Tensor:
        ctx.span, ctx.opens = span, opens
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        if ctx.opens:
            local = grad.to_local() if isinstance(grad, DTensor) else grad
            ctx.span.open(tensor_bytes(local))
        else:
            grad = _settled(grad)
            ctx.span.close()
        return grad, None, None


class ReplicatedInput(ParallelStyle):
    """Make a module's first input a replicated DTensor once, timing its gradient's all-reduce."""

    def __init__(self, comm: CommRecorder) -> None:
        self.comm = comm

    def _apply(self, module: nn.Module, device_mesh: Any) -> nn.Module:
        comm = self.comm

        def convert(x: torch.Tensor) -> torch.Tensor:
            if isinstance(x, DTensor):
                return x
            span = _OpenSpan(comm)
            x = _SpanMark.apply(x, span, False)
            replicated = DTensor.from_local(x, device_mesh, [Replicate()], run_check=False)
            return _SpanMark.apply(replicated, span, True)

        def hook(mod: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            if args:
                return (convert(args[0]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": convert(kwargs["hidden_states"])}

        module.register_forward_pre_hook(hook, with_kwargs=True)
        return module


class RecordedRowwise(RowwiseParallel):
    """`RowwiseParallel` whose output all-reduce is synchronous and recorded."""

    def __init__(self, comm: CommRecorder) -> None:
        super().__init__()
        self.comm = comm

    def _prepare_output_fn(  # type: ignore[override]
        self, output_layouts: Any, use_local_output: bool, mod: nn.Module, outputs: Any, mesh: Any
    ) -> Any:
        with self.comm.span(DIM, "all_reduce", tensor_bytes(outputs.to_local())):
            outputs = outputs.redistribute(placements=output_layouts, async_op=False)
            local = _settled(outputs.to_local())
        return local if use_local_output else outputs


class _Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ops: TpOps) -> torch.Tensor:
        ctx.ops = ops
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.ops.all_reduce(grad), None


class _Reduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ops: TpOps) -> torch.Tensor:
        return ops.all_reduce(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class TpOps:
    """Megatron's conjugate pair on the tp group, recorded (see the module docstring)."""

    def __init__(self, group: Any, comm: CommRecorder) -> None:
        self.group = group
        self.comm = comm

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        out = x.contiguous().clone()
        with self.comm.span(DIM, "all_reduce", tensor_bytes(out)):
            dist.all_reduce(out, group=self.group)
        return out

    def copy(self, x: torch.Tensor) -> torch.Tensor:
        return _Copy.apply(x, self)

    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        return _Reduce.apply(x, self)


def apply_tensor_parallel(
    family: ModelCard, blocks: list[nn.Module], tp_mesh: Any, comm: CommRecorder
) -> None:
    """Split every block over ``tp_mesh`` (in place) as the family says."""
    split = family.tensor_parallel
    if split.apply is not None:
        ops = TpOps(tp_mesh.get_group(), comm)
        for block in blocks:
            split.apply(block, tp_mesh, ops)
        return
    if split.plan is None:
        raise ValueError(f"{family.name} has no tensor-parallel split: {split.reason}")
    styles = {"colwise": ColwiseParallel, "rowwise": lambda: RecordedRowwise(comm)}
    plan: dict[str, ParallelStyle] = {name: ReplicatedInput(comm) for name in split.inputs}
    plan.update({name: styles[style]() for name, style in split.plan.items()})
    for block in blocks:
        for name in split.inputs:  # inputs first: their hooks must run before the projections'
            parallelize_module(block, tp_mesh, {name: plan[name]})
        parallelize_module(block, tp_mesh, {k: v for k, v in plan.items() if k not in split.inputs})
