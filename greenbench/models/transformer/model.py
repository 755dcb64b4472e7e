"""Llama-style decoder-only Transformer, built with transformers' `LlamaForCausalLM`.

Randomly initialised from a size preset (nothing is downloaded), SDPA attention, RoPE, SwiGLU MLP,
RMSNorm, untied LM head. The presets and their analytic description are the family's card
(`greenbench.models.transformer.card`).

Batches are ``input_ids`` (B, T), ``labels`` (B, T) with -100 on padding, and optionally
``position_ids`` (B, T) so packed sequences restart their positions.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from greenbench.models.transformer.card import PRESETS, info

__all__ = ["PRESETS", "build", "info", "make_config"]


def make_config(size: str, *, vocab_size: int | None = None) -> LlamaConfig:
    """The transformers config for a preset (``size`` must be a key of `PRESETS`)."""
    p = PRESETS[size]
    return LlamaConfig(
        vocab_size=vocab_size or p.vocab_size,
        hidden_size=p.d_model,
        intermediate_size=p.d_ffn,
        num_hidden_layers=p.n_layers,
        num_attention_heads=p.n_heads,
        num_key_value_heads=p.n_kv_heads,
        max_position_embeddings=p.max_position_embeddings,
        rms_norm_eps=p.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": p.rope_theta},
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="sdpa",
    )


def build(size: str, *, vocab_size: int | None = None, kernel: str = "none") -> torch.nn.Module:
    """A randomly initialised `LlamaForCausalLM` (SDPA attention; ``kernel`` has no choices
    here); seed the RNG before calling."""
    del kernel
    return LlamaForCausalLM(make_config(size, vocab_size=vocab_size))
