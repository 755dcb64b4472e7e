"""The standard workloads: each a question, base settings, and the settings it sweeps.

A workload reads like an experiment plan: what is held fixed, what varies. Suites in
``greenbench/suites/*.toml`` pick workloads and override settings;
``greenbench run --workload NAME`` runs one with ``--set`` overrides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from greenbench.errors import SpecError


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    question: str
    base: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, list[Any]] = field(default_factory=dict)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="transformer-vs-mamba",
            question=(
                "Does a state-space model (Mamba) train more tokens per joule than a Transformer "
                "of the same parameter count, and at which sequence length does it win?"
            ),
            base={"model.size": "tiny", "data.lengths": "fixed", "strategy": "single"},
            sweep={
                "model.family": ["transformer", "mamba"],
                "data.seq_len": [256, 512, 1024, 2048],
            },
        ),
        Workload(
            name="data-parallel",
            question=(
                "How much time do data-parallel ranks spend waiting when post-training sequence "
                "lengths are skewed, and what does that waiting cost in joules?"
            ),
            base={
                "model.size": "tiny",
                "strategy": "ddp",
                "nproc": 2,
                # LongAlign at 1/64 scale spans ~110–900 tokens: rows of 1024 keep documents whole
                "data.seq_len": 1024,
                "data.scale": 1.0 / 64.0,
                "data.global_batch": 16,
                "data.micro_batch": 1,
                # what a plain DDP/FSDP script does: DistributedSampler's split, equal
                # microbatch counts; "same-count" balances ranks' costs first (ODC's baseline)
                "data.balance": "sampler",
            },
            sweep={"strategy": ["ddp", "fsdp"], "data.lengths": ["fixed", "longalign"]},
        ),
        Workload(
            name="fsdp-vs-odc",
            question=(
                "Does on-demand communication (ODC) train skewed post-training data faster and "
                "for fewer joules than FSDP, by letting ranks run different numbers of "
                "microbatches and meet once per minibatch instead of at every microbatch?"
            ),
            base={
                "model.size": "tiny",
                # ODC's shared-memory transport serves CPU ranks of one host (its CUDA IPC
                # transport is not built), so both sides of the comparison run there
                "device": "cpu",
                "data.seq_len": 1024,
                "data.scale": 1.0 / 64.0,
                "data.global_batch": 16,
                "data.micro_batch": 1,
                # each strategy's own: same-count for fsdp (the paper's baseline: equal
                # microbatch counts), balanced-cost for odc
                "data.balance": "auto",
            },
            sweep={
                "strategy": ["fsdp", "odc"],
                "data.lengths": ["fixed", "uniform", "swe-smith", "longalign"],
                "nproc": [2, 4],
            },
        ),
        Workload(
            name="hybrid",
            question=(
                "Which way of splitting a model over four devices (data, tensor, pipeline or "
                "context parallel, or a mix) trains fastest, holds the least per device and "
                "costs the fewest joules per token, for a Transformer and for Mamba?"
            ),
            base={
                "model.size": "tiny",
                # each layout's own strategy: ddp for dpr4, fsdp for dps4, hybrid for the rest
                "strategy": "auto",
                "data.lengths": "fixed",
                "data.seq_len": 512,
                "data.global_batch": 8,
                "data.micro_batch": 1,
            },
            sweep={
                "model.family": ["transformer", "mamba"],
                "layout": ["dpr4", "dps4", "tp2-dps2", "pp2-dps2", "pp4", "cp2-dps2", "tp2-pp2"],
            },
        ),
        Workload(
            name="skippipe",
            question=(
                "With heterogeneous or failing nodes, how much iteration time does "
                "skip-scheduled pipeline parallelism save over a full pipeline, and what does "
                "it cost in loss?"
            ),
            base={
                "model.size": "tiny",
                "model.family": "transformer",
                "strategy": "skippipe",
                "nproc": 4,
                "data.lengths": "fixed",
                "data.seq_len": 256,
                "data.global_batch": 8,
                "data.micro_batch": 1,
                # a data node, stage 1 (blocks 0-1) on two nodes, stage 2 (blocks 2-3) on one
                "skippipe.stages": "1-2-1",
                "skippipe.skip": 0.5,
                # links between nodes: 10 ms and 1 Gb/s; a straggler computes 3x as long
                "emulate.link_latency_ms": 10.0,
                "emulate.link_bandwidth_gbps": 1.0,
                "emulate.slowdown": 3.0,
            },
            sweep={"skippipe.schedule": ["full", "skippipe"], "emulate.slow_nodes": ["", "2"]},
        ),
    )
}


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise SpecError(
            f"unknown workload {name!r} (known: {', '.join(sorted(WORKLOADS))})"
        ) from None
