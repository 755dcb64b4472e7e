"""Predicted step time, peak memory and J/token of one layout: the planner's cost model.

Units: seconds (s), bytes (B), joules (J), tokens. Every figure here is a **prediction**.

One optimizer step moves ``global_batch × seq_len`` tokens. Each data-parallel rank
(``dp = dp_replicate × dp_shard``) runs ``m = global_batch / (dp × micro_batch)`` microbatches.

* compute: the analytic training FLOPs (`greenbench.models.flops`' formulas) of the tokens
  one device trains, ``global_batch × seq_len / (dp × cp)``, at the device's sustained FLOP/s,
  times the power limit's slowdown; where the device carries rates fitted for the family
  (`DeviceModel.rates`), its matrix products and its kernel (attention, with the causal
  discount and the context split's imbalance, or a scan) at their own rates instead
  (`greenbench.planner.rates`). A token's FLOPs are its blocks' (split by tp) and the LM
  head's (``6 × (vocab × d + d)``, on the last stage and whole on every tp rank: the models'
  tensor-parallel plans leave the head replicated); a pipeline runs at the pace of its busiest
  stage, the first stages taking the extra blocks when ``pp`` does not divide the layers.
* pipeline: the stages idle the bubble's share ``(p−1)/(m+p−1)``, so the compute stretches by
  ``(m+p−1)/m``.
* communication, priced by the α–β model (`greenbench.planner.alpha_beta`) over the link each
  group uses:
  - tp: per block and microbatch, the all-reduces the family's split issues (its card's
    `PlannerTerms.tp_all_reduces`): Megatron-LM's tensor parallelism for the Transformer, two
    forward and two backward of the microbatch's activations ``tokens/cp × d × bytes`` (the
    row-wise outputs forward, the replicated inputs' gradients backward); Mamba's split
    all-reduces its ``x_proj`` output (``dt_rank + 2·d_state`` wide) and its ``out_proj``
    output forward, and the same two sizes backward;
  - cp: per block and microbatch, the family's context-parallel messages (`PlannerTerms.
    cp_passes` and ``cp_message``): the ring passes the K and V chunks ``cp−1`` times forward
    and K, V and their gradients twice that backward (ring attention); Mamba passes its scan
    state ``d_inner × d_state`` along the ranks forward and back;
  - pp: per microbatch, one activation forward and one gradient backward between stages,
    ``tokens/cp × d × bytes`` (the residual stream is whole on every tp rank, each sends its own);
  - dp_shard (FSDP, over ``dp_shard × cp`` ranks: the context-parallel ranks shard with the
    data-parallel ones, as torchtitan does): per microbatch, the stage's parameters gathered
    twice (forward, backward) in the activation dtype and the gradients reduce-scattered in
    fp32, one call per FSDP unit (each block, and the root);
  - dp_replicate: once per step, an all-reduce of the fp32 gradients each replica holds; beside
    FSDP (HSDP, the hybrid strategy), an all-reduce of each unit's fp32 gradient shard after
    its reduce-scatter, per microbatch as the reduce-scatters are, where it hides (or not) as
    they do: it is issued on their stream (`greenbench.strategies.fsdp.replicate_hook`).
  tp, cp and pp communication lies on the critical path. Data-parallel communication of the
  dimensions the device overlaps (`DeviceModel.overlapped`: on GPUs both, as FSDP prefetches on
  its own stream and DDP reduces in buckets during backward; on a CPU host only DDP's, whose
  gloo all-reduce runs on its own thread while backward computes, FSDP2's collectives blocking
  the step) is exposed only where it exceeds the compute time; the others add to the step.
* energy: each device draws busy power while computing and idle power while waiting (bubble and
  exposed communication), `greenbench.planner.power`.
* memory: `greenbench.planner.memory`; a layout fits when its peak is at most 90 % of the device's
  memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from greenbench.models import ModelPreset
from greenbench.planner import alpha_beta
from greenbench.planner.device import DeviceModel
from greenbench.planner.memory import Memory, fsdp_shards, per_device, stage_params
from greenbench.planner.rates import HEAD_FLOPS_PER_PARAM, device_work, stage_blocks
from greenbench.vocabulary import MESH_ORDER, Layout

GRAD_BYTES = 4  # gradients are reduced in fp32 (the parameters are fp32)


@dataclass(frozen=True, slots=True)
class Batch:
    """What one optimizer step trains: ``global_batch`` sequences of ``seq_len`` tokens over all
    ranks, ``micro_batch`` sequences per microbatch, in ``precision`` (bf16 or fp32)."""

    seq_len: int
    global_batch: int
    micro_batch: int
    precision: str = "bf16"

    @property
    def activation_bytes(self) -> int:
        return 2 if self.precision == "bf16" else 4

    @property
    def tokens(self) -> int:
        return self.global_batch * self.seq_len

    def microbatches(self, layout: Layout) -> int | None:
        """Microbatches per data-parallel rank, or None when the batch does not divide."""
        per_rank = layout.dp * self.micro_batch
        if self.global_batch % per_rank:
            return None
        return self.global_batch // per_rank


@dataclass(frozen=True, slots=True)
class Prediction:
    """Predicted figures of one layout (all predictions, none measured)."""

    layout: Layout
    microbatches: int
    step_s: float
    compute_s: float
    bubble_s: float
    comm_s: float  # exposed communication per step
    tokens_per_s: float
    joules_per_token: float
    memory: Memory
    fits: bool

    @property
    def wait_fraction(self) -> float:
        return (self.step_s - self.compute_s) / self.step_s


def link_of(layout: Layout, dim: str, device: DeviceModel) -> alpha_beta.Link:
    """The link a ``dim`` group uses: the fast one when all its ranks share a fast domain.

    Ranks are numbered along `MESH_ORDER` (outermost first), so a group of ``dim`` spans
    ``degree × (product of the degrees inside it)`` consecutive ranks.
    """
    inner = math.prod(getattr(layout, d) for d in MESH_ORDER[MESH_ORDER.index(dim) + 1 :])
    span = inner * getattr(layout, dim)
    if span <= device.fast_domain and device.fast_domain % span == 0:
        return device.fast
    return device.network


def block_flops_per_token(shape: ModelPreset, seq_len: int) -> float:
    """Training FLOPs of one block per token at ``seq_len`` (all of a token's but the head's)."""
    return (shape.flops_per_token(seq_len) - HEAD_FLOPS_PER_PARAM * shape.head_params) / (
        shape.n_layers
    )


def device_flops_per_token(shape: ModelPreset, layout: Layout, seq_len: int) -> float:
    """FLOPs per token one tp rank of the busiest pipeline stage computes (module docstring)."""
    block = block_flops_per_token(shape, seq_len) / layout.tp
    head = HEAD_FLOPS_PER_PARAM * shape.head_params
    stages = stage_blocks(shape.n_layers, layout.pp)
    return max(n * block + (head if i == len(stages) - 1 else 0.0) for i, n in enumerate(stages))


def communication(
    shape: ModelPreset, layout: Layout, batch: Batch, device: DeviceModel, m: int
) -> tuple[float, float]:
    """(seconds on the critical path, seconds of collectives that overlap compute) per step on
    one device (module docstring)."""
    blocks = math.ceil(shape.n_layers / layout.pp)
    tokens = batch.micro_batch * batch.seq_len / layout.cp
    act = tokens * shape.d_model * batch.activation_bytes
    critical = 0.0
    if layout.tp > 1:
        link = link_of(layout, "tp", device)
        per_block = sum(
            calls * alpha_beta.all_reduce(tokens * width * batch.activation_bytes, layout.tp, link)
            for calls, width in shape.tp_all_reduces
        )
        critical += m * blocks * per_block
    if layout.cp > 1:
        link = link_of(layout, "cp", device)
        per_token, per_sequence = shape.cp_message
        message = tokens * per_token * batch.activation_bytes + batch.micro_batch * per_sequence
        passes = shape.planner.cp_passes * (layout.cp - 1)
        per_block = passes * alpha_beta.point_to_point(message / layout.tp, link)
        critical += m * blocks * per_block
    if layout.pp > 1:
        critical += 2 * m * alpha_beta.point_to_point(act, link_of(layout, "pp", device))
    params = max(stage_params(shape, layout, last=last) for last in (False, True))
    shards = fsdp_shards(layout)
    overlapped = 0.0
    if shards > 1:  # FSDP over dp_shard × cp; its group spans dp_shard's, cp inside it
        link = link_of(layout, "dp_shard", device)
        units = blocks + 1
        gather = alpha_beta.all_gather(params * batch.activation_bytes, shards, link, units)
        scatter = alpha_beta.reduce_scatter(params * GRAD_BYTES, shards, link, units)
        seconds = m * (2 * gather + scatter)
        if "dp_shard" in device.overlapped:
            overlapped += seconds
        else:
            critical += seconds
    if layout.dp_replicate > 1:
        grads = params / shards * GRAD_BYTES
        link = link_of(layout, "dp_replicate", device)
        if shards > 1:  # HSDP: the shard's all-reduce follows each unit's reduce-scatter
            seconds = alpha_beta.all_reduce(m * grads, layout.dp_replicate, link, m * (blocks + 1))
            hides_in = "dp_shard"
        else:
            seconds = alpha_beta.all_reduce(grads, layout.dp_replicate, link)
            hides_in = "dp_replicate"
        if hides_in in device.overlapped:
            overlapped += seconds
        else:
            critical += seconds
    return critical, overlapped


def predict(
    shape: ModelPreset, layout: Layout, batch: Batch, device: DeviceModel
) -> Prediction | None:
    """The predicted figures of ``layout``, or None when the batch does not divide over it."""
    m = batch.microbatches(layout)
    if m is None:
        return None
    tokens = batch.tokens / (layout.dp * layout.cp)
    rate = device.rates.get(shape.family)
    if rate is None:  # the card's whole count at the one sustained rate
        flops = tokens * device_flops_per_token(shape, layout, batch.seq_len)
        compute_s = flops / device.sustained_flops * device.power.slowdown
    else:  # per family and kernel (`greenbench.planner.rates`)
        work = device_work(shape, layout, batch.seq_len)
        compute_s = rate.seconds(work, tokens) * device.power.slowdown
    bubble_s = compute_s * (layout.pp - 1) / m  # = pipeline time × (p−1)/(m+p−1)
    critical_s, overlapped_s = communication(shape, layout, batch, device, m)
    comm_s = critical_s + max(0.0, overlapped_s - compute_s)
    step_s = compute_s + bubble_s + comm_s
    energy_j = layout.world * device.power.energy_j(compute_s, step_s - compute_s)
    memory = per_device(
        shape,
        layout,
        micro_batch=batch.micro_batch,
        seq_len=batch.seq_len,
        activation_bytes=batch.activation_bytes,
        microbatches=m,
    )
    return Prediction(
        layout=layout,
        microbatches=m,
        step_s=step_s,
        compute_s=compute_s,
        bubble_s=bubble_s,
        comm_s=comm_s,
        tokens_per_s=batch.tokens / step_s,
        joules_per_token=energy_j / batch.tokens,
        memory=memory,
        fits=memory.total_b <= device.usable_memory_bytes,
    )
