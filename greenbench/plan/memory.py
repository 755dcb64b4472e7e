"""Memory per device: the one memory model of greenbench, in bytes.

Used twice: the launcher's preflight (`greenbench.plan.estimate`) takes the terms no training
step avoids, as a **lower bound** to refuse what cannot fit; the planner takes every term below,
as a **prediction** of peak memory per device. Both read the same functions here.

Terms, per device, for AdamW training with fp32 master weights (the models are built in float32;
bf16 runs autocast, so the state is fp32 either way):

* model state: parameter, gradient and AdamW's two moments, 4 bytes each, 16 bytes per
  parameter of the device's pipeline stage, divided by the degrees that split it: ``dp_shard``
  (FSDP shards the state) and ``tp`` (each rank holds a slice of every matrix). ``dp_replicate``
  and ``cp`` split nothing of it. A pipeline stage holds ``ceil(layers / pp)`` blocks plus the
  embedding (first stage) or the final norm and LM head (last stage); the larger stage counts.
* gather buffers: with ``dp_shard > 1`` FSDP unshards one block for compute and prefetches the
  next: two blocks' parameters in the activation dtype, divided by ``tp``.
* activations: what backward keeps of one microbatch, per token and block, in the activation
  dtype (2 bytes bf16, 4 fp32), without recompute. A Llama block keeps its two norm inputs and
  outputs, Q, K, V, the attention output (flash attention keeps no S×S scores), and the SwiGLU
  MLP's gate, up and their product: ``6·d + 2·d_kv + 3·d_ffn`` elements per token — 32·d bytes
  in bf16 for the 7b preset, close to the ``34·d`` of Korthikanti et al. 2022 ("Reducing
  Activation Recomputation in Large Transformer Models", a GPT block with a 4·d MLP). A Mamba
  block keeps its norm input and output and six inner-width tensors (the two halves of
  ``in_proj``, the conv output, Δ, the scan output, the gated output): ``2·d + 6·d_inner``, as a
  fused scan that saves only its inputs needs; the per-step torch scan keeps far more. Tokens of
  a microbatch are split by ``cp``; tensor parallelism with sequence parallelism (torchtitan's
  plan) splits every activation by ``tp``. A 1F1B pipeline's first stage keeps ``min(m, pp)``
  microbatches in flight.
* logits: the loss upcasts the microbatch's logits to float32, ``tokens × vocab × 4`` bytes, on
  the last stage (not split by tp: no vocabulary-parallel loss is assumed).

The preflight's lower bound is model state over ``dp_shard × tp × pp`` plus logits plus one
residual stream per layer (``tokens × d × bytes × layers``), the least any step keeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from greenbench.plan.shapes import ModelShape
from greenbench.vocabulary import Layout

ADAMW_BYTES_PER_PARAM = 16  # fp32 parameter + gradient + exp_avg + exp_avg_sq
LOSS_BYTES = 4  # the loss upcasts logits to float32


def state_bytes(n_params: float, shards: int) -> float:
    """Parameters, gradients and AdamW moments of ``n_params`` split over ``shards`` ranks."""
    return n_params * ADAMW_BYTES_PER_PARAM / shards


def logits_bytes(tokens: float, vocab_size: int) -> float:
    """The float32 logits the loss reads for ``tokens`` tokens."""
    return tokens * vocab_size * LOSS_BYTES


def residual_bytes(tokens: float, d_model: int, n_layers: int, activation_bytes: int) -> float:
    """One residual stream per layer kept for backward: the least any block keeps."""
    return tokens * d_model * activation_bytes * n_layers


def block_activation_elements(shape: ModelShape) -> float:
    """Elements one block keeps for backward, per token (module docstring)."""
    if shape.family == "mamba":
        return 2.0 * shape.d_model + 6.0 * (shape.d_inner or 0)
    return 6.0 * shape.d_model + 2.0 * shape.kv_dim + 3.0 * (shape.d_ffn or 0)


@dataclass(frozen=True, slots=True)
class Memory:
    """Predicted peak bytes on the busiest device, by term."""

    state_b: float
    buffers_b: float
    activations_b: float
    logits_b: float

    @property
    def total_b(self) -> float:
        return self.state_b + self.buffers_b + self.activations_b + self.logits_b


def per_device(
    shape: ModelShape,
    layout: Layout,
    *,
    micro_batch: int,
    seq_len: int,
    activation_bytes: int,
    microbatches: int,
) -> Memory:
    """Predicted peak memory of the busiest device of ``layout`` (``microbatches`` per step and
    data-parallel rank, which bounds the microbatches a pipeline keeps in flight)."""
    layers = math.ceil(shape.n_layers / layout.pp)
    block_params = shape.params_per_layer() * layers
    embedding = float(shape.n_params_embedding)
    head = float(shape.n_params - shape.n_params_embedding) - shape.params_per_layer() * (
        shape.n_layers
    )
    tokens = micro_batch * seq_len / layout.cp
    per_block = tokens * block_activation_elements(shape) * activation_bytes / layout.tp
    buffers = 0.0
    if layout.dp_shard > 1:
        buffers = 2 * shape.params_per_layer() * activation_bytes / layout.tp
    shards = layout.dp_shard * layout.tp
    logits = logits_bytes(tokens, shape.vocab_size)
    if layout.pp == 1:
        return Memory(
            state_bytes(block_params + embedding + head, shards),
            buffers,
            per_block * layers,
            logits,
        )
    in_flight = min(microbatches, layout.pp)
    first = Memory(state_bytes(block_params + embedding, shards), buffers,
                   per_block * layers * in_flight, 0.0)  # fmt: skip
    last = Memory(state_bytes(block_params + head, shards), buffers, per_block * layers, logits)
    return max(first, last, key=lambda m: m.total_b)
