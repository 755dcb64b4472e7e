"""The standard workloads: each a question, base settings, and the settings it sweeps.

A workload reads like an experiment plan: what is held fixed, what varies. Suites in
``greenbench/suites/*.toml`` pick workloads and override settings;
``greenbench run --workload NAME`` runs one with ``--set`` overrides. A user's own workload
(``--workload mypkg.bench:workload``, or a name its package registers) is described here the same
way (`from_user`), from the object its entry point returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from greenbench.errors import SpecError
from greenbench.user.contract import USER_PREFIX, user_key
from greenbench.user.entry import LoadedWorkload


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    question: str
    base: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, list[Any]] = field(default_factory=dict)
    #: a user's own workload, loaded from its entry point (None for greenbench's own)
    user: LoadedWorkload | None = None


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="transformer-vs-mamba",
            question=(
                "Does a state-space model (Mamba, Mamba-2) train more tokens per joule than a "
                "Transformer of the same parameter count, and at which sequence length does it "
                "win?"
            ),
            base={"model.size": "tiny", "data.lengths": "fixed", "strategy": "single"},
            sweep={
                "model.family": ["transformer", "mamba", "mamba2"],
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
        Workload(
            name="power-limit",
            question=(
                "How much energy per token does a lower GPU power limit save, and what does it "
                "cost in speed? The energy–time Pareto over limits, the lowest-J/token limit "
                "within 10 % of full speed, and Zeus's choice beside it"
            ),
            base={
                # a GPU size: on a machine without GPUs, emulate.gpu and a tiny model try it
                "model.size": "125m",
                "strategy": "single",
                "data.lengths": "fixed",
                "data.seq_len": 1024,
                "data.global_batch": 8,
                "data.micro_batch": 4,
                # long windows: NVML's counter steps every ~100 ms, and a limit settles in ~1 s
                "train.min_window_s": 5.0,
            },
            sweep={
                "model.family": ["transformer", "mamba"],
                "gpu.power_limit_frac": [1.0, 0.85, 0.7, 0.55],
            },
        ),
    )
}


def get_workload(name: str) -> Workload:
    """A workload by name: greenbench's own, a name a package registered under the
    ``greenbench.workloads`` entry-point group, or a user entry point ``module.path:attribute``
    (`greenbench.user`)."""
    if name in WORKLOADS:
        return WORKLOADS[name]
    from greenbench.user import entry

    if entry.is_entry_point(name) or name in entry.registered():
        return from_user(entry.load(name))
    registered = sorted(entry.registered())
    raise SpecError(
        f"unknown workload {name!r} (known: {', '.join(sorted(WORKLOADS))}"
        + (f"; registered by installed packages: {', '.join(registered)}" if registered else "")
        + "; or your own as module.path:attribute)"
    )


def from_user(loaded: LoadedWorkload) -> Workload:
    """A user workload as greenbench's own are described: named by its entry point (the name
    its runs are stored under), its question, the settings it fixes and sweeps (its own named
    bare or as ``user.NAME``)."""
    own = loaded.workload
    declared = {key.removeprefix(USER_PREFIX) for key in own.settings}

    def key(name: str) -> str:
        return user_key(name) if name in declared else name

    return Workload(
        name=loaded.ref,
        question=own.question or f"{own.name}: a user workload ({loaded.ref})",
        base={key(k): v for k, v in own.base.items()},
        sweep={key(k): list(v) for k, v in own.sweep.items()},
        user=loaded,
    )
