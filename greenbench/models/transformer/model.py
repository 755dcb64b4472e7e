"""Llama-style decoder-only Transformer, built with transformers' `LlamaForCausalLM`.

Randomly initialised from a size preset (nothing is downloaded), SDPA attention, RoPE, SwiGLU MLP,
RMSNorm, untied LM head. Presets, like torchtitan's flavours:

* ``tiny``  — a few million parameters, for CPU tests and reference runs.
* ``125m``, ``350m`` — GPT-3 small/medium widths and depths, Llama blocks, Llama-2 vocabulary.
* ``1b``    — TinyLlama-1.1B's shape (d 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632).
* ``7b``    — Llama-2-7B's shape (d 4096, 32 layers, 32 heads, FFN 11008, vocab 32000).

FFN widths of the small presets follow torchtitan's rule: 2/3 · 4d rounded up to a multiple of 256.
Batches are ``input_ids`` (B, T), ``labels`` (B, T) with -100 on padding, and optionally
``position_ids`` (B, T) so packed sequences restart their positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from greenbench.models.family import ModelInfo


@dataclass(frozen=True, slots=True)
class TransformerPreset:
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ffn: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096


PRESETS: dict[str, TransformerPreset] = {
    "tiny": TransformerPreset(
        d_model=256, n_layers=4, n_heads=8, n_kv_heads=8, d_ffn=768, vocab_size=1024
    ),
    "125m": TransformerPreset(
        d_model=768, n_layers=12, n_heads=12, n_kv_heads=12, d_ffn=2048, vocab_size=32000
    ),
    "350m": TransformerPreset(
        d_model=1024, n_layers=24, n_heads=16, n_kv_heads=16, d_ffn=2816, vocab_size=32000
    ),
    "1b": TransformerPreset(
        d_model=2048, n_layers=22, n_heads=32, n_kv_heads=4, d_ffn=5632, vocab_size=32000
    ),
    "7b": TransformerPreset(
        d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, d_ffn=11008, vocab_size=32000
    ),
}


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


def info(size: str, *, vocab_size: int | None = None) -> ModelInfo:
    """Analytic parameter counts and shape of a preset (equal to the built model's counts)."""
    p = PRESETS[size]
    vocab = vocab_size or p.vocab_size
    d, head_dim = p.d_model, p.d_model // p.n_heads
    attention = d * p.n_heads * head_dim * 2 + d * p.n_kv_heads * head_dim * 2  # q, o; k, v
    mlp = 3 * d * p.d_ffn  # gate, up, down
    per_layer = attention + mlp + 2 * d  # + two RMSNorm weights
    embedding = vocab * d
    non_embedding = p.n_layers * per_layer + d + vocab * d  # + final norm + untied LM head
    return ModelInfo(
        family="transformer",
        size=size,
        n_params=embedding + non_embedding,
        n_params_embedding=embedding,
        n_params_non_embedding=non_embedding,
        n_layers=p.n_layers,
        d_model=d,
        vocab_size=vocab,
        n_heads=p.n_heads,
        n_kv_heads=p.n_kv_heads,
        d_ffn=p.d_ffn,
    )
