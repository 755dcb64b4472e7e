"""How Mamba is split: its blocks (FSDP units, pipeline cut points), its tensor-parallel split
of the inner channels, and its pipeline stages.

Tensor parallelism splits the inner channels (``d_inner``) over ``tp`` ranks: ``in_proj``
column-wise (each rank holds its channels' rows of both halves, x and the gate), the depthwise
conv, Δ's projection ``dt_proj``, ``A_log``, ``D`` and the gate per channel, ``out_proj``
row-wise. Parameters become DTensors sharded on the ``tp`` mesh (so FSDP2 composes with them
and a full tensor can be gathered), and the mixer computes on their local shards.

Why not a plan of torch's stock ``ColwiseParallel`` / ``RowwiseParallel`` styles, as for the
Transformer: ``x_proj`` mixes every inner channel into Δ's low-rank input and the scan's B and
C, so it is row-wise (its output a partial sum, all-reduced) — but that output then feeds
channel-local computation on every rank (dt_proj, the scan), so its gradient is again a partial
sum that needs an all-reduce in backward. Row-wise output followed by column-wise use is the
pattern the stock styles do not place (they assume a row-wise output feeds replicated
computation). The mixer therefore calls two recorded collectives itself, Megatron's conjugate
pair: ``copy`` (identity forward, all-reduce of the gradient backward) and ``reduce``
(all-reduce forward, identity backward). Per layer and microbatch: forward all-reduces x_proj's
output (T·B·(R+2N) values) and out_proj's (T·B·d); backward all-reduces the same two sizes'
gradients (x_proj's output, the mixer's input).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from greenbench.models.card import TensorParallel
from greenbench.models.mamba.model import FastScanMambaMixer, causal_depthwise_conv1d
from greenbench.models.mamba.scan import selective_scan


class TpOps(Protocol):
    """The two tensor-parallel collectives a split block calls (recorded by the caller)."""

    def copy(self, x: torch.Tensor) -> torch.Tensor: ...

    def reduce(self, x: torch.Tensor) -> torch.Tensor: ...


def blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The Mamba blocks of a `MambaForCausalLM`, in order."""
    return list(model.backbone.layers)


def _local(t: torch.Tensor | None) -> torch.Tensor | None:
    return t.to_local() if t is not None and hasattr(t, "to_local") else t


class TensorParallelMambaMixer(FastScanMambaMixer):
    """The fast mixer on this rank's inner channels (see the module docstring)."""

    tp_ops: Any = None

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):  # type: ignore[override]
        if cache_params is not None or attention_mask is not None:
            raise NotImplementedError("a tensor-parallel Mamba mixer trains without cache or mask")
        ops = self.tp_ops
        dtype = hidden_states.dtype
        hidden = ops.copy(hidden_states.transpose(0, 1).contiguous())  # (T, B, d_model)
        w_in = _local(self.in_proj.weight)
        channels = w_in.shape[0] // 2  # this rank's rows: [x channels; gate channels]
        x = F.linear(hidden, w_in[:channels])
        gate = F.linear(hidden, w_in[channels:])
        x = self.act(
            causal_depthwise_conv1d(x, _local(self.conv1d.weight), _local(self.conv1d.bias))
        )
        mixed = ops.copy(ops.reduce(F.linear(x, _local(self.x_proj.weight))))
        time_step, B, C = torch.split(
            mixed, [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1
        )
        delta = F.softplus(
            F.linear(time_step, _local(self.dt_proj.weight), _local(self.dt_proj.bias))
        )
        A = -torch.exp(_local(self.A_log).float())
        y = selective_scan(
            x, delta, A, B, C, chunk_size=self.scan_chunk_size, backend=self.scan_backend
        )
        y = (y + x * _local(self.D)) * F.silu(gate)
        out = F.linear(y.to(dtype), _local(self.out_proj.weight))
        return ops.reduce(out).transpose(0, 1)


#: parameter of a mixer -> the dimension its inner channels run along
_CHANNEL_DIM = {
    "in_proj.weight": 0,
    "conv1d.weight": 0,
    "conv1d.bias": 0,
    "x_proj.weight": 1,
    "dt_proj.weight": 0,
    "dt_proj.bias": 0,
    "A_log": 0,
    "D": 0,
    "out_proj.weight": 1,
}


def shard_block(block: nn.Module, tp_mesh: Any, ops: TpOps) -> None:
    """Split one `MambaBlock`'s mixer over ``tp_mesh`` (in place; see the module docstring)."""
    from torch.distributed.tensor import Shard, distribute_tensor

    mixer = block.mixer
    if mixer.use_bias or mixer.in_proj.bias is not None:
        raise NotImplementedError("tensor parallelism expects Mamba's bias-free projections")
    tp = tp_mesh.size()
    inner = mixer.intermediate_size
    with torch.no_grad():  # rows [x_0, gate_0, x_1, gate_1, ...]: each shard holds both halves
        w = mixer.in_proj.weight
        x_rows, gate_rows = w[:inner].chunk(tp), w[inner:].chunk(tp)
        w.copy_(torch.cat([t for pair in zip(x_rows, gate_rows, strict=True) for t in pair]))
    for name, dim in _CHANNEL_DIM.items():
        owner_name, _, leaf = name.rpartition(".")
        owner = mixer.get_submodule(owner_name) if owner_name else mixer
        param = getattr(owner, leaf)
        sharded = distribute_tensor(param.detach(), tp_mesh, [Shard(dim)])
        setattr(owner, leaf, nn.Parameter(sharded, requires_grad=param.requires_grad))
    mixer.__class__ = TensorParallelMambaMixer
    mixer.tp_ops = ops


def unshard_in_proj(weight: torch.Tensor, tp: int) -> torch.Tensor:
    """The single-process layout of a gathered tensor-parallel ``in_proj`` weight."""
    pieces = weight.chunk(2 * tp)
    return torch.cat([*pieces[0::2], *pieces[1::2]])


TENSOR_PARALLEL = TensorParallel(
    plan=None,
    reason=(
        "x_proj's row-wise output feeds channel-local computation, so its gradient needs an "
        "all-reduce the stock styles do not place; the mixer calls its own recorded pair"
    ),
    apply=shard_block,
)


class MambaStage(nn.Module):
    """Blocks ``[lo, hi)`` of a `MambaForCausalLM` as one pipeline stage: the first embeds token
    ids, the last applies the final norm and the LM head; others return ``(hidden,
    position_ids)`` (Mamba ignores positions; they travel so every family's stages agree)."""

    def __init__(
        self, model: nn.Module, lo: int, hi: int, embed: bool | None, head: bool | None
    ) -> None:
        super().__init__()
        backbone = model.backbone
        n_layers = len(backbone.layers)
        self.embeddings = backbone.embeddings if (lo == 0 if embed is None else embed) else None
        self.layers = nn.ModuleList(backbone.layers[lo:hi])
        last = hi == n_layers if head is None else head
        self.norm_f = backbone.norm_f if last else None
        self.lm_head = model.lm_head if last else None

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        h = self.embeddings(x) if self.embeddings is not None else x
        for layer in self.layers:
            h = layer(h)
        if self.lm_head is not None:
            return self.lm_head(self.norm_f(h).to(self.lm_head.weight.dtype))
        return h, position_ids


def pipeline_stage(
    model: nn.Module, lo: int, hi: int, *, embed: bool | None = None, head: bool | None = None
) -> nn.Module:
    """Blocks ``[lo, hi)`` of ``model`` as a stage (see `MambaStage`); ``embed`` / ``head``
    override whether it embeds token ids (default: ``lo == 0``) and ends in the LM head
    (default: ``hi`` is the last block)."""
    return MambaStage(model, lo, hi, embed, head)
