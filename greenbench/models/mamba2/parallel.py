"""How Mamba-2 is split: its blocks (FSDP units, pipeline cut points), its pipeline stages, and
its tensor-parallel split by whole groups of heads.

Tensor parallelism splits Mamba-2 by heads, Megatron-LM's way, and the heads' groups of B and C
split with them: each of the ``tp`` ranks holds ``n_groups / tp`` whole groups — their heads'
rows of ``in_proj`` (gate, x and dt), their groups' B and C rows, the conv's channels over x, B
and C, ``dt_bias``, ``A_log`` and ``D`` of its heads, its channels of the gated RMSNorm, and
``out_proj`` column-wise (row-wise parallel: its output is a partial sum, all-reduced). The
gated RMSNorm normalises within a group (transformers' and mamba-ssm's ``group_size =
d_inner / n_groups``), so a rank's whole groups normalise locally; the SSD scan runs per head on
the rank's heads with their own groups' B and C. Per layer and microbatch: forward one
all-reduce of ``out_proj``'s output (T·B·d), backward one of the mixer input's gradient (the
conjugate ``copy``). The rows of ``in_proj`` and the conv are reordered once (each rank's gate,
x, B, C, dt side by side) so that one dim-0 shard holds them; `unshard_rows` undoes it on a
gathered tensor.

That requires ``tp`` to divide ``n_groups``, and the presets have one group (Mamba-2's
published shapes): every head reads the same B and C, and the gated norm spans all ``d_inner``
channels. A split of that would replicate B and C on every rank (their parameters' gradients
then partial sums to all-reduce) and all-reduce the norm's statistics forward and backward: not
a split of the stock styles, nor one this project has checked. The card's `tp_divides` therefore
names the groups, and the spec refuses ``tp > 1`` on every preset in one line ("layout.tp=2
does not divide the 1 SSM groups ..."); ``apply`` refuses a block whose groups tp does not
divide. The split itself is checked on a model built with two groups (tests), which no preset
or setting offers yet.

Why not a plan of torch's stock styles: ``in_proj``'s output is five parts of different widths
(gate, x, B, C, dt), each to be split per rank, so no single column-wise shard of the weight
holds a rank's part of each; and the mixer computes on its shards with transformers' modules
around them (the conv, the gated norm), so it calls the recorded pair itself, as Mamba-1's
split does (`greenbench.models.mamba.parallel`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from greenbench.errors import SpecError
from greenbench.models.card import TensorParallel
from greenbench.models.mamba.parallel import MambaStage
from greenbench.models.mamba2.model import SSDMamba2Mixer, causal_depthwise_conv1d

REASON = (
    "each tensor-parallel rank holds whole groups of heads with their B, C and gated-norm "
    "group, so tp must divide n_groups (1 in every preset); the mixer calls its own recorded "
    "collectives"
)


def blocks(model: nn.Module) -> list[nn.Module]:
    """The Mamba-2 blocks of a `Mamba2ForCausalLM`, in order."""
    return list(model.backbone.layers)


def _local(t: torch.Tensor | None) -> torch.Tensor | None:
    return t.to_local() if t is not None and hasattr(t, "to_local") else t


def gated_rms_norm(
    y: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, group_size: int, eps: float
) -> torch.Tensor:
    """transformers' ``MambaRMSNormGated`` on local tensors: ``y · SiLU(gate)`` normalised over
    each group of ``group_size`` channels, times ``weight`` (in ``y``'s dtype)."""
    dtype = y.dtype
    h = y.float() * F.silu(gate.float())
    grouped = h.view(*h.shape[:-1], -1, group_size)
    grouped = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)
    return weight * grouped.view_as(h).to(dtype)


class TensorParallelMamba2Mixer(SSDMamba2Mixer):
    """The SSD mixer on this rank's whole groups of heads (see the module docstring)."""

    tp_ops: Any = None
    tp_size: int = 1

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):  # type: ignore[override]
        if cache_params is not None or attention_mask is not None:
            raise NotImplementedError(
                "a tensor-parallel Mamba-2 mixer trains without cache or mask"
            )
        ops, tp = self.tp_ops, self.tp_size
        batch, seq_len, _ = hidden_states.shape
        heads, groups, head_dim = self.num_heads // tp, self.n_groups // tp, self.head_dim
        inner, state = self.intermediate_size // tp, self.ssm_state_size
        dtype = hidden_states.dtype
        hidden = ops.copy(hidden_states)
        gate, xBC, dt = F.linear(hidden, _local(self.in_proj.weight)).split(
            [inner, inner + 2 * groups * state, heads], dim=-1
        )
        conv_w, conv_b = _local(self.conv1d.weight), _local(self.conv1d.bias)
        xBC = self.act(causal_depthwise_conv1d(xBC, conv_w, conv_b))
        x, B, C = xBC.split([inner, groups * state, groups * state], dim=-1)
        dt = F.softplus(dt + _local(self.dt_bias))
        low, high = self.time_step_limit
        if (low, high) != (0.0, float("inf")):
            dt = dt.clamp(low, high)
        A = -torch.exp(_local(self.A_log).float())
        x = x.reshape(batch, seq_len, heads, head_dim)
        y = self.scan(
            x,
            dt,
            A,
            B.reshape(batch, seq_len, groups, state),
            C.reshape(batch, seq_len, groups, state),
        )
        y = y.float() + x.float() * _local(self.D).float()[:, None]
        y = gated_rms_norm(
            y.reshape(batch, seq_len, inner),
            gate,
            _local(self.norm.weight),
            self.norm.group_size,
            self.norm.variance_epsilon,
        )
        return ops.reduce(F.linear(y.to(dtype), _local(self.out_proj.weight)))


def _row_parts(mixer: nn.Module, name: str) -> list[int]:
    """The widths of the parts, along dim 0, of ``in_proj`` or the conv, in the model's order."""
    inner, bc = mixer.intermediate_size, mixer.n_groups * mixer.ssm_state_size
    if name == "in_proj.weight":
        return [inner, inner, bc, bc, mixer.num_heads]  # gate, x, B, C, dt
    return [inner, bc, bc]  # the conv over x, B, C


def shard_rows(t: torch.Tensor, parts: list[int], tp: int) -> torch.Tensor:
    """Rows ``[p0, p1, …]`` as ``[p0_0, p1_0, …, p0_1, p1_1, …]``: rank r's slice of every part
    side by side, so dim-0 shard r holds them."""
    pieces = [part.chunk(tp) for part in t.split(parts)]
    return torch.cat([piece[r] for r in range(tp) for piece in pieces])


def unshard_rows(t: torch.Tensor, parts: list[int], tp: int) -> torch.Tensor:
    """The model's row order of a gathered `shard_rows` tensor."""
    per_rank = [n // tp for n in parts]
    ranks = [shard.split(per_rank) for shard in t.chunk(tp)]
    return torch.cat([ranks[r][i] for i in range(len(parts)) for r in range(tp)])


#: parameter of a mixer -> the dimension its heads' channels (or groups') run along
_SPLIT_DIM = {
    "in_proj.weight": 0,
    "conv1d.weight": 0,
    "conv1d.bias": 0,
    "dt_bias": 0,
    "A_log": 0,
    "D": 0,
    "norm.weight": 0,
    "out_proj.weight": 1,
}


def shard_block(block: nn.Module, tp_mesh: Any, ops: Any) -> None:
    """Split one Mamba-2 block's mixer over ``tp_mesh`` by whole groups (in place; module doc)."""
    from torch.distributed.tensor import Shard, distribute_tensor

    mixer = block.mixer
    tp = tp_mesh.size()
    if mixer.n_groups % tp:
        raise SpecError(
            f"model.family=mamba2: layout.tp={tp} does not divide the mixer's "
            f"{mixer.n_groups} SSM groups ({REASON})"
        )
    if mixer.in_proj.bias is not None or mixer.out_proj.bias is not None:
        raise NotImplementedError("tensor parallelism expects Mamba-2's bias-free projections")
    with torch.no_grad():
        for name in ("in_proj.weight", "conv1d.weight", "conv1d.bias"):
            param = mixer.get_parameter(name)
            param.copy_(shard_rows(param, _row_parts(mixer, name), tp))
    for name, dim in _SPLIT_DIM.items():
        owner_name, _, leaf = name.rpartition(".")
        owner = mixer.get_submodule(owner_name) if owner_name else mixer
        param = getattr(owner, leaf)
        sharded = distribute_tensor(param.detach(), tp_mesh, [Shard(dim)])
        setattr(owner, leaf, nn.Parameter(sharded, requires_grad=param.requires_grad))
    mixer.__class__ = TensorParallelMamba2Mixer
    mixer.tp_ops, mixer.tp_size = ops, tp


TENSOR_PARALLEL = TensorParallel(plan=None, reason=REASON, apply=shard_block)


def pipeline_stage(
    model: nn.Module, lo: int, hi: int, *, embed: bool | None = None, head: bool | None = None
) -> nn.Module:
    """Blocks ``[lo, hi)`` of ``model`` as one stage. `Mamba2ForCausalLM` is laid out as Mamba-1's
    model is (``backbone.embeddings``, ``backbone.layers``, ``backbone.norm_f``, ``lm_head``) and
    its blocks take the hidden states alone, so its stages are `MambaStage`s."""
    return MambaStage(model, lo, hi, embed, head)
