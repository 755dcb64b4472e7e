"""The Transformer's card: its presets, `ModelInfo`, FLOPs, what tensor parallelism divides, the
planner's terms and its run options, without torch (`greenbench.models.card`).

Llama-style decoder-only presets, like torchtitan's flavours:

* ``tiny``  — a few million parameters, for CPU tests and reference runs.
* ``125m``, ``350m`` — GPT-3 small/medium widths and depths, Llama blocks, Llama-2 vocabulary.
* ``1b``    — TinyLlama-1.1B's shape (d 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632).
* ``7b``    — Llama-2-7B's shape (d 4096, 32 layers, 32 heads, FFN 11008, vocab 32000).

FFN widths of the small presets follow torchtitan's rule: 2/3 · 4d rounded up to a multiple of 256.
The model itself (transformers' `LlamaForCausalLM`) is built in
`greenbench.models.transformer.model`.
"""

from __future__ import annotations

from dataclasses import dataclass

from greenbench.models.card import ModelCard, ModelInfo, PlannerTerms
from greenbench.models.transformer.flops import (
    transformer_attention_flops_per_token,
    transformer_flops_per_token,
)


@dataclass(frozen=True)
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


def info(size: str, *, vocab_size: int | None = None) -> ModelInfo:
    """Analytic parameter counts and shape of a preset (equal to the built model's counts)."""
    p = PRESETS[size]
    vocab = vocab_size or p.vocab_size
    d, head_dim = p.d_model, p.d_model // p.n_heads
    attention = d * p.n_heads * head_dim * 2 + d * p.n_kv_heads * head_dim * 2  # q, o; k, v
    mlp = 3 * d * p.d_ffn  # gate, up, down
    per_layer = attention + mlp + 2 * d  # + two RMSNorm weights
    return ModelInfo.of_stack(
        "transformer",
        size,
        n_layers=p.n_layers,
        d_model=d,
        vocab_size=vocab,
        per_layer=per_layer,
        n_heads=p.n_heads,
        n_kv_heads=p.n_kv_heads,
        d_ffn=p.d_ffn,
    )


def tp_divides(info: ModelInfo) -> dict[str, int]:
    """What a tensor-parallel degree must divide: each rank holds whole attention heads."""
    return {"attention heads": info.n_heads or 0, "key/value heads": info.n_kv_heads or 0}


def activations(info: ModelInfo, cp: int) -> tuple[float, float]:
    """Elements a Llama block keeps per token (whole, split by tp): per RMSNorm its input, the
    inverse RMS, the normalised input and the output (twice); Q and K after RoPE, V, the
    attention output and log-sum-exp per head; the SwiGLU MLP's gate, up, SiLU(gate) and their
    product; under ring attention (cp > 1) its output copied back for ``o_proj``."""
    d, heads, ffn = info.d_model, info.n_heads or 0, info.d_ffn or 0
    ring = d if cp > 1 else 0
    return 2 * (3.0 * d + 1), 2.0 * d + 2.0 * info.kv_dim + heads + 4.0 * ffn + ring


CARD = ModelCard(
    name="transformer",
    presets=PRESETS,
    describe=info,
    flops=transformer_flops_per_token,
    attention=transformer_attention_flops_per_token,
    tp_divides=tp_divides,
    planner=PlannerTerms(
        norms_per_block=2,
        activations=activations,
        # Megatron's split: the row-wise outputs forward, the replicated inputs' gradients
        # backward, of attention and of the MLP
        tp_all_reduces=lambda info: ((4, info.d_model),),
        # ring attention: K and V chunks cp − 1 times forward, K, V and their gradients twice
        # that backward
        cp_passes=3,
        cp_message=lambda info: (2 * info.kv_dim, 0.0),
        # scores and the weighted sum: 2 matmuls × 2 FLOPs × 3 (forward + backward) over d
        # channels and S keys, the card's attention part (PaLM's count, one block's share)
        kernel="attention",
        kernel_flops=lambda info, seq_len: (
            transformer_attention_flops_per_token(info, seq_len) / info.n_layers
        ),
        causal=True,
    ),
    parts_module="greenbench.models.transformer.parts",
    context_parallel=True,
    cp_name="ring attention, fp32",
    cp_layout="zigzag",
    torch_cp=True,
    fixed_kernels={"attention": "sdpa"},
    compiled_by_default=True,
    fused_kernels=True,
)
