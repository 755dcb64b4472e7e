"""How the Transformer is split: its blocks (FSDP units, pipeline cut points), its
tensor-parallel plan (Megatron's: q/k/v and gate/up column-wise, o and down row-wise, so one
all-reduce per attention and one per MLP in each direction) and its pipeline stages."""

from __future__ import annotations

import torch
from torch import nn
from transformers.masking_utils import create_causal_mask

from greenbench.models.card import TensorParallel


def blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of a `LlamaForCausalLM`, in order."""
    return list(model.model.layers)


TENSOR_PARALLEL = TensorParallel(
    plan={
        "self_attn.q_proj": "colwise",
        "self_attn.k_proj": "colwise",
        "self_attn.v_proj": "colwise",
        "self_attn.o_proj": "rowwise",
        "mlp.gate_proj": "colwise",
        "mlp.up_proj": "colwise",
        "mlp.down_proj": "rowwise",
    },
    inputs=("self_attn", "mlp"),
)


class LlamaStage(nn.Module):
    """Decoder layers ``[lo, hi)`` of a `LlamaForCausalLM` as one pipeline stage.

    The first stage embeds token ids, the last applies the final norm and the LM head and
    returns logits; every other stage returns ``(hidden, position_ids)``, so positions (which
    restart at every packed document) travel with the activations: each stage needs them for
    its rotary embeddings and its document-causal mask, computed exactly as `LlamaModel` does.
    """

    def __init__(
        self, model: nn.Module, lo: int, hi: int, embed: bool | None, head: bool | None
    ) -> None:
        super().__init__()
        inner = model.model
        n_layers = len(inner.layers)
        self.config = model.config
        self.embed_tokens = inner.embed_tokens if (lo == 0 if embed is None else embed) else None
        self.layers = nn.ModuleList(inner.layers[lo:hi])
        self.rotary_emb = inner.rotary_emb
        last = hi == n_layers if head is None else head
        self.norm = inner.norm if last else None
        self.lm_head = model.lm_head if last else None

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        h = self.embed_tokens(x) if self.embed_tokens is not None else x
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=h,
            attention_mask=None,
            past_key_values=None,
            position_ids=position_ids,
        )
        rope = self.rotary_emb(h, position_ids=position_ids)
        for layer in self.layers:
            h = layer(h, attention_mask=mask, position_embeddings=rope, position_ids=position_ids)
        if self.lm_head is not None:
            return self.lm_head(self.norm(h))
        return h, position_ids


def pipeline_stage(
    model: nn.Module, lo: int, hi: int, *, embed: bool | None = None, head: bool | None = None
) -> nn.Module:
    """Layers ``[lo, hi)`` of ``model`` as a stage (see `LlamaStage`); ``embed`` / ``head``
    override whether it embeds token ids (default: ``lo == 0``) and ends in the LM head
    (default: ``hi`` is the last layer)."""
    return LlamaStage(model, lo, hi, embed, head)
