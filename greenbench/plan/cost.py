"""Predicted step time, peak memory and J/token of one layout: the planner's cost model.

Units: seconds (s), bytes (B), joules (J), tokens. Every figure here is a **prediction**.

One optimizer step moves ``global_batch × seq_len`` tokens. Each data-parallel rank
(``dp = dp_replicate × dp_shard``) runs ``m = global_batch / (dp × micro_batch)`` microbatches.

* compute: the analytic training FLOPs of the step (`greenbench.models.flops`' formulas) split
  evenly over the devices, at the device's sustained FLOP/s, times the power limit's slowdown;
  a pipeline whose stages hold unequal numbers of blocks runs at the pace of the largest.
* pipeline: the stages idle the bubble's share ``(p−1)/(m+p−1)``, so the compute stretches by
  ``(m+p−1)/m``.
* communication, priced by the α–β model (`greenbench.plan.comm`) over the link each group uses:
  - tp: per block and microbatch, two all-reduces forward and two backward of the microbatch's
    activations ``tokens/cp × d × bytes`` (Megatron-LM's tensor parallelism; with sequence
    parallelism an all-gather and a reduce-scatter move the same bytes);
  - cp: per block and microbatch, the ring passes the K and V chunks ``cp−1`` times forward and
    K, V and their gradients twice that backward (ring attention); Mamba passes its scan state
    ``d_inner × d_state`` along the ranks forward and back;
  - pp: per microbatch, one activation forward and one gradient backward between stages,
    ``tokens/cp × d × bytes / tp``;
  - dp_shard (FSDP): per microbatch, the stage's parameters gathered twice (forward, backward)
    in the activation dtype and the gradients reduce-scattered in fp32;
  - dp_replicate: once per step, an all-reduce of the fp32 gradients each replica holds.
  tp, cp and pp communication lies on the critical path. Data-parallel communication overlaps
  compute (FSDP prefetches, DDP reduces in buckets during backward), so only what exceeds the
  compute time is exposed.
* energy: each device draws busy power while computing and idle power while waiting (bubble and
  exposed communication), `greenbench.plan.power`.
* memory: `greenbench.plan.memory`; a layout fits when its peak is at most 90 % of the device's
  memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from greenbench.plan import comm
from greenbench.plan.device import DeviceModel
from greenbench.plan.memory import Memory, per_device
from greenbench.plan.shapes import ModelShape
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


def link_of(layout: Layout, dim: str, device: DeviceModel) -> comm.Link:
    """The link a ``dim`` group uses: the fast one when all its ranks share a fast domain.

    Ranks are numbered along `MESH_ORDER` (outermost first), so a group of ``dim`` spans
    ``degree × (product of the degrees inside it)`` consecutive ranks.
    """
    inner = math.prod(getattr(layout, d) for d in MESH_ORDER[MESH_ORDER.index(dim) + 1 :])
    span = inner * getattr(layout, dim)
    if span <= device.fast_domain and device.fast_domain % span == 0:
        return device.fast
    return device.network


def communication(
    shape: ModelShape, layout: Layout, batch: Batch, device: DeviceModel, m: int
) -> tuple[float, float]:
    """(critical-path seconds of tp, cp and pp; seconds of data-parallel collectives) per step
    on one device (module docstring)."""
    blocks = math.ceil(shape.n_layers / layout.pp)
    tokens = batch.micro_batch * batch.seq_len / layout.cp
    act = tokens * shape.d_model * batch.activation_bytes
    critical = 0.0
    if layout.tp > 1:
        per_block = 4 * comm.all_reduce(act, layout.tp, link_of(layout, "tp", device))
        critical += m * blocks * per_block
    if layout.cp > 1:
        link = link_of(layout, "cp", device)
        if shape.family == "mamba":
            state = batch.micro_batch * (shape.d_inner or 0) * (shape.d_state or 0) * 4
            per_block = 2 * (layout.cp - 1) * comm.point_to_point(state / layout.tp, link)
        else:
            kv = tokens * 2 * shape.kv_dim * batch.activation_bytes / layout.tp
            per_block = 3 * (layout.cp - 1) * comm.point_to_point(kv, link)
        critical += m * blocks * per_block
    if layout.pp > 1:
        critical += 2 * m * comm.point_to_point(act / layout.tp, link_of(layout, "pp", device))
    stage_params = shape.n_params / layout.pp / layout.tp
    data = 0.0
    if layout.dp_shard > 1:
        link = link_of(layout, "dp_shard", device)
        gather = comm.all_gather(stage_params * batch.activation_bytes, layout.dp_shard, link)
        scatter = comm.reduce_scatter(stage_params * GRAD_BYTES, layout.dp_shard, link)
        data += m * (2 * gather + scatter)
    if layout.dp_replicate > 1:
        grads = stage_params / layout.dp_shard * GRAD_BYTES
        link = link_of(layout, "dp_replicate", device)
        data += comm.all_reduce(grads, layout.dp_replicate, link)
    return critical, data


def predict(
    shape: ModelShape, layout: Layout, batch: Batch, device: DeviceModel
) -> Prediction | None:
    """The predicted figures of ``layout``, or None when the batch does not divide over it."""
    m = batch.microbatches(layout)
    if m is None:
        return None
    imbalance = math.ceil(shape.n_layers / layout.pp) * layout.pp / shape.n_layers
    flops = shape.flops_per_token(batch.seq_len) * batch.tokens / layout.world
    compute_s = flops / device.sustained_flops * device.power.slowdown * imbalance
    bubble_s = compute_s * (layout.pp - 1) / m  # = pipeline time × (p−1)/(m+p−1)
    critical_s, data_s = communication(shape, layout, batch, device, m)
    comm_s = critical_s + max(0.0, data_s - compute_s)
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
