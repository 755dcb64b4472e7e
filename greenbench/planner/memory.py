"""Memory per device: the one memory model of greenbench, in bytes.

Used twice: the launcher's preflight (`greenbench.planner.estimate`) takes the terms no training
step avoids, as a **lower bound** to refuse what cannot fit; the planner takes every term below,
as a **prediction** of peak memory per device. Both read the same functions here.

Terms, per device, for AdamW training with fp32 master weights (the models are built in float32;
bf16 runs autocast, so the state is fp32 either way):

* model state: parameter, gradient and AdamW's two moments, 4 bytes each, 16 bytes per
  parameter of the device's pipeline stage, divided by the degrees that split it:
  ``dp_shard × cp`` (FSDP shards all of it over the data-parallel shards and the
  context-parallel ranks together, as torchtitan and the hybrid strategy do: cp ranks hold the
  same parameters) and ``tp`` (each rank holds a slice of every block matrix; the blocks'
  RMSNorm weights, the embedding, the final norm and the LM head stay whole, as the models'
  tensor-parallel plans leave them). ``dp_replicate`` splits nothing of it. A pipeline stage
  holds ``ceil(layers / pp)`` blocks plus the embedding (first stage) or the final norm and LM
  head (last stage); the larger stage counts.
* gather buffers: with ``dp_shard × cp > 1`` FSDP unshards one block for compute and prefetches
  the next: two blocks' parameters in the activation dtype, their tp slice.
* activations: what autograd keeps saved for backward of one microbatch, per token and block,
  in the activation dtype (2 bytes bf16, 4 fp32), without recompute — counted from the tensors
  the project's models save (`greenbench.rank.state_memory` counts the same on real runs);
  each family's count is its card's (`greenbench.models.card.PlannerTerms`).
  A Llama block (transformers' `LlamaDecoderLayer`, SDPA) keeps, per RMSNorm, its input, the
  inverse RMS, the normalised input and the output (``3·d + 1``, twice); Q and K after RoPE,
  V, the attention output and the attention's log-sum-exp per head (``2·d + 2·d_kv + heads``,
  flash-style attention keeps no S×S scores); and the SwiGLU MLP's gate, up, SiLU(gate) and
  their product (``4·d_ffn``): ``8·d + 2·d_kv + 4·d_ffn + heads + 2`` elements — 41.5·d bytes
  in bf16 for the 7b preset, against the ``34·d`` of Korthikanti et al. 2022 ("Reducing
  Activation Recomputation in Large Transformer Models", a GPT block with a 4·d MLP and
  LayerNorm, which keeps no normalised input or SiLU output). A Mamba block keeps its RMSNorm
  (``3·d + 1``), nine inner-width tensors (the conv's input and output, SiLU(conv) as
  ``x_proj``'s input, Δ before and after softplus, the scan output, the skip sum, the gate
  and the gated output), ``x_proj``'s output (``dt_rank + 2·d_state``), the scan's B and C
  (``2·d_state``) and the project's chunked scan's saved states (``d_state · d_inner`` every
  `greenbench.models.mamba.card.SCAN_CHUNK` tokens), plus ``A`` and ``−A`` once per block
  (``2·d_inner·d_state``).
  A Mamba-2 block on the project's torch SSD scan (`greenbench.models.mamba2`; D = d_inner,
  N = d_state, H heads, G groups, Q the chunk length) keeps its RMSNorm (``3·d + 1``),
  ``in_proj``'s output (``2·D + 2·G·N + H``), the conv's padded input, output and SiLU output
  (``3·(D + 2·G·N)``), the scan's per-head decay mask and masked scores (``2·H·Q``) and the
  groups' ``C·Bᵀ`` (``G·Q``), nine ``D``-wide tensors (dt·x in two layouts, the chunk states'
  input, the start states' output, the D skip's and the gated norm's, ``out_proj``'s input),
  the chunks' start states twice (``2·D·N/Q``) and ~``5·H`` per-head scalars;
  measured on the ``tiny`` and ``125m`` shapes within 1%. mamba-ssm's and fla's kernels keep
  less (they recompute the chunk products in backward); the model prices the torch scan.
  Under ``cp > 1`` it keeps the start-state correction's product and decays too (``D + H``,
  an estimate: `greenbench.models.mamba2.context_parallel`).
  Tokens of a microbatch are split by ``cp``; the project's ring attention (``cp > 1``) keeps
  one more ``d`` per token, its output copied back into the attention layout for ``o_proj``
  (flash attention returns that layout directly). Tensor parallelism (Megatron's, without sequence
  parallelism, as the project's plans apply it) splits what lies between a column-wise and a
  row-wise projection (Q, K, V, attention, the MLP's inner tensors; Mamba's inner channels) by
  ``tp``; the residual stream, the norms and ``x_proj``'s output stay whole on every rank. A
  1F1B pipeline's first stage keeps ``min(m, pp)`` microbatches in flight.
* logits and head: the loss's log-softmax keeps the microbatch's logits in float32,
  ``tokens × vocab × 4`` bytes, on the last stage (not split by tp: no vocabulary-parallel loss),
  beside the final RMSNorm's ``3·d + 1`` per token.

`Memory.model_state_b` is the state, activations and logits without the gather buffers: what a
rank holds as tensors of its own, the figure ``state_bytes`` measures. Under bf16 autocast the
elements are priced at 2 bytes, although transformers' RMSNorm keeps its tensors in float32 and
autocast saves a bf16 copy of every matmul's input and weight: a bf16 step holds more than this
(the model has been checked against float32 runs only).

The preflight's lower bound is model state over ``dp_shard × tp × pp`` plus logits plus one
residual stream per layer (``tokens × d × bytes × layers``), the least any step keeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from greenbench.models import ModelPreset
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


def block_activation_elements(shape: ModelPreset, tp: int = 1, cp: int = 1) -> float:
    """Elements one block keeps for backward, per token, on one of ``tp`` ranks (of ``cp``)."""
    whole, split = shape.planner.activations(shape.info, cp)
    return whole + split / tp


def fsdp_shards(layout: Layout) -> int:
    """Ranks FSDP shards the state over: the data-parallel shards and the cp ranks together."""
    return layout.dp_shard * layout.cp


def block_activation_constant(shape: ModelPreset, tp: int = 1) -> float:
    """Elements one block keeps whatever the tokens, on one of ``tp`` ranks: Mamba's ``A`` and
    ``−A`` (0 otherwise)."""
    return shape.planner.activation_constant(shape.info) / tp


def head_activation_elements(shape: ModelPreset) -> float:
    """Elements per token the final RMSNorm keeps (besides the logits)."""
    return 3.0 * shape.d_model + 1


def block_params_on_rank(shape: ModelPreset, tp: int) -> float:
    """Parameters of one block on one of ``tp`` ranks: its matrices split, its norms whole."""
    norms = shape.norm_params_per_layer()
    return (shape.params_per_layer() - norms) / tp + norms


def stage_params(shape: ModelPreset, layout: Layout, *, last: bool) -> float:
    """Parameters one tp rank of a pipeline stage holds before FSDP shards them:
    ``ceil(layers / pp)`` blocks plus the embedding (first stage), the final norm and head (last
    stage), or both (one stage)."""
    blocks = math.ceil(shape.n_layers / layout.pp) * block_params_on_rank(shape, layout.tp)
    if layout.pp == 1:
        return blocks + shape.n_params_embedding + shape.head_params
    return blocks + (shape.head_params if last else shape.n_params_embedding)


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

    @property
    def model_state_b(self) -> float:
        """What the rank holds as tensors of its own (no gather buffers): the figure a run's
        tensor-counted ``state_bytes`` measures."""
        return self.state_b + self.activations_b + self.logits_b


def per_device(
    shape: ModelPreset,
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
    block = block_params_on_rank(shape, layout.tp)
    tokens = micro_batch * seq_len / layout.cp
    per_block = (
        tokens * block_activation_elements(shape, layout.tp, layout.cp)
        + block_activation_constant(shape, layout.tp)
    ) * activation_bytes
    shards = fsdp_shards(layout)
    buffers = 2 * block * activation_bytes if shards > 1 else 0.0
    final_norm = tokens * head_activation_elements(shape) * activation_bytes
    logits = logits_bytes(tokens, shape.vocab_size)
    last = Memory(
        state_bytes(stage_params(shape, layout, last=True), shards),
        buffers,
        per_block * layers + final_norm,
        logits,
    )
    if layout.pp == 1:
        return last
    in_flight = min(microbatches, layout.pp)
    first = Memory(
        state_bytes(stage_params(shape, layout, last=False), shards),
        buffers,
        per_block * layers * in_flight,
        0.0,
    )
    return max(first, last, key=lambda m: m.total_b)
