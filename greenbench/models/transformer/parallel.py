"""How the Transformer is split: its blocks (FSDP units, pipeline cut points) and its
tensor-parallel plan (Megatron's: q/k/v and gate/up column-wise, o and down row-wise, so one
all-reduce per attention and one per MLP in each direction)."""

from __future__ import annotations

import torch

from greenbench.models.family import ModelInfo, TensorParallel


def blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of a `LlamaForCausalLM`, in order."""
    return list(model.model.layers)


def tp_divides(info: ModelInfo) -> dict[str, int]:
    """What a tensor-parallel degree must divide: each rank holds whole attention heads."""
    return {"attention heads": info.n_heads or 0, "key/value heads": info.n_kv_heads or 0}


TENSOR_PARALLEL = TensorParallel(
    divides=tp_divides,
    plan={
        "self_attn.q_proj": "colwise",
        "self_attn.k_proj": "colwise",
        "self_attn.v_proj": "colwise",
        "self_attn.o_proj": "rowwise",
        "mlp.gate_proj": "colwise",
        "mlp.up_proj": "colwise",
        "mlp.down_proj": "rowwise",
    },
)
