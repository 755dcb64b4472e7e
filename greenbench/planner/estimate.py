"""What a configuration needs at the least, before it runs: memory per node and seconds.

Both are **lower bounds**, so refusing on them never refuses a run that could have fitted:

* memory: the model state every rank must hold (parameters, gradients and AdamW's two moments,
  16 bytes per fp32 parameter, divided over the degrees that split them: ``dp_shard``, ``cp``
  (sharded with it), ``tp``, ``pp``) plus the two activation tensors no training step avoids for
  one microbatch (the float32 logits the loss reads, ``tokens × vocab × 4`` bytes, and one
  residual stream per layer kept for backward, ``tokens × d_model × bytes`` per layer), with the
  tokens split over ``cp``, the layers over ``pp`` (the smallest stage) and the logits left out
  when a pipeline has them on its last stage only, times the ranks on a node;
* time: the analytic FLOPs of the run's steps (warm-up, and every repeat's window at least
  ``train.steps`` long or ``train.min_window_s`` long, whichever ends first) at 100 % of the
  devices' peak. Real runs reach a fraction of peak, so they take longer still.

Plain numbers in, plain numbers out: the launcher fills `Need` from the model's analytic
description and the data's length distribution, and compares it with the machine. The memory
terms are those of the planner's memory model (`greenbench.planner.memory`): one model, taken here
at its least.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from greenbench.planner.memory import (
    ADAMW_BYTES_PER_PARAM,
    LOSS_BYTES,
    logits_bytes,
    residual_bytes,
    state_bytes,
)

__all__ = ["ADAMW_BYTES_PER_PARAM", "LOSS_BYTES", "Need", "duration", "gib"]


@dataclass(frozen=True, slots=True)
class Need:
    """A configuration's shape, as the estimates need it."""

    n_params: int
    n_layers: int
    d_model: int
    vocab_size: int
    flops_per_token: float  # analytic training FLOPs per token at this sequence length
    world: int  # ranks
    ranks_per_node: int
    shards: int  # product of the degrees that split the model state (dp_shard × cp × tp × pp)
    micro_batch: int
    seq_len: int
    tokens_per_step: float  # over all ranks (from the length distribution)
    activation_bytes: int  # bytes per activation element (4 fp32, 2 bf16)
    warmup_steps: int
    repeats: int
    steps: int  # minimum measured steps per repeat
    max_steps: int
    min_window_s: float
    pp: int = 1  # pipeline stages: a rank keeps its stage's layers
    cp: int = 1  # context-parallel ranks: a rank keeps its slice of the sequence

    def state_bytes_per_rank(self) -> float:
        return state_bytes(self.n_params, self.shards)

    def activation_bytes_per_rank(self) -> float:
        tokens = self.micro_batch * self.seq_len / self.cp
        logits = logits_bytes(tokens, self.vocab_size) if self.pp == 1 else 0.0
        layers = self.n_layers // self.pp
        residual = residual_bytes(tokens, self.d_model, layers, self.activation_bytes)
        return float(logits + residual)

    def memory_bytes_per_node(self) -> float:
        """Lower bound of what the ranks of one node hold at once."""
        per_rank = self.state_bytes_per_rank() + self.activation_bytes_per_rank()
        return self.ranks_per_node * per_rank

    def step_seconds(self, peak_flops_per_device: float) -> float:
        """Lower bound of one optimizer step: its FLOPs at the devices' full peak."""
        return self.flops_per_token * self.tokens_per_step / (peak_flops_per_device * self.world)

    def run_seconds(self, peak_flops_per_device: float) -> float:
        """Lower bound of the whole configuration: warm-up and every repeat's window."""
        t = self.step_seconds(peak_flops_per_device)
        window = max(self.steps * t, min(self.min_window_s, self.max_steps * t))
        return self.warmup_steps * t + self.repeats * window


def gib(n: float) -> str:
    """Bytes as a short GiB text for messages."""
    return f"{n / 2**30:,.1f} GiB" if n >= 2**27 else f"{n / 2**20:,.1f} MiB"


def duration(seconds: float) -> str:
    """Seconds as a short text for messages (s, h or days)."""
    if not math.isfinite(seconds):
        return "forever"
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 86400:,.0f} days"
