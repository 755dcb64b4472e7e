"""What must hold before anything runs, so that a run that cannot finish is refused at once
with its reason instead of failing (or timing out and losing its repeats) much later.

* A forced energy source (``--energy-source``) must work here, and measure this run's devices:
  NVML reads GPUs, so it cannot measure a CPU run. One line, exit 2, nothing written. So must
  a node meter named outright (``energy.node=ipmi`` needs ipmitool).
* A configuration must fit the machine: one device per rank (the visible GPUs, or as many as
  ``--devices`` lends), and lower bounds of the memory and time it needs
  (`greenbench.planner.estimate`) against the memory the node has available now (CPU) or its GPUs'
  memory (CUDA), and against ``timeout_s``. ``--force`` skips this check for a user who knows
  better.
"""

from __future__ import annotations

import numpy as np

from greenbench.errors import MeterUnavailable
from greenbench.planner.estimate import Need, duration, gib
from greenbench.settings.runspec import RunSpec


def need_of(spec: RunSpec) -> Need:
    """The estimates' view of ``spec`` (analytic model shape, expected tokens per step)."""
    from greenbench.data.lengths import sample_lengths
    from greenbench.models import model_info
    from greenbench.models.flops import flops_per_token

    c = spec.config
    run, data, train = c.run, c.data, c.train
    info = model_info(c.model.family, c.model.size)
    layout = spec.layout
    rng = np.random.default_rng([run.seed, 0])
    sample = min(data.global_batch, 4096)  # enough for the mean, bounded for any batch
    lengths = sample_lengths(data.lengths, sample, rng, seq_len=data.seq_len, scale=data.scale)
    tokens_per_step = float(lengths.mean()) * data.global_batch
    return Need(
        n_params=info.n_params,
        n_layers=info.n_layers,
        d_model=info.d_model,
        vocab_size=info.vocab_size,
        flops_per_token=flops_per_token(info, data.seq_len),
        world=layout.world,
        ranks_per_node=run.nproc,
        shards=layout.dp_shard * layout.cp * layout.tp * layout.pp,
        pp=layout.pp,
        cp=layout.cp,
        micro_batch=data.micro_batch,
        seq_len=data.seq_len,
        tokens_per_step=tokens_per_step,
        activation_bytes=2 if run.precision == "bf16" else 4,
        warmup_steps=train.warmup_steps,
        repeats=run.repeats,
        steps=train.steps,
        max_steps=train.max_steps,
        min_window_s=train.min_window_s,
    )


def memory_available(spec: RunSpec) -> tuple[float, str]:
    """(bytes the ranks of one node can use, what that is) on this machine."""
    run = spec.config.run
    if run.device == "cuda":
        import torch

        per_gpu = torch.cuda.get_device_properties(0).total_memory
        return float(per_gpu) * run.nproc, f"{run.nproc} × {gib(per_gpu)} GPU memory"
    import psutil

    available = psutil.virtual_memory().available
    return float(available), f"{gib(available)} of memory available on this node"


def devices_here(device: str, limit: int | None = None) -> int | None:
    """Devices one node lends a configuration: the visible CUDA devices on cuda (at most
    ``limit``), ``limit`` ranks on cpu (None: no limit; CPU ranks share the cores)."""
    if device == "cuda":
        import torch

        visible = torch.cuda.device_count()
        return visible if limit is None else min(visible, limit)
    return limit


def why_unsupported(spec: RunSpec) -> str | None:
    """Why ``spec``'s strategy cannot run it on its device or hosts with what is built
    (`greenbench.strategies.card.StrategyCard.unsupported`), or None."""
    from greenbench.strategies import STRATEGIES
    from greenbench.vocabulary import is_user_workload

    if is_user_workload(spec.workload):
        return None
    config = spec.config
    return STRATEGIES[config.run.strategy].unsupported(config, spec.layout)


def why_too_few_devices(spec: RunSpec, limit: int | None = None) -> str | None:
    """The reason ``spec``'s ranks cannot each have a device of this node, or None."""
    run = spec.config.run
    have = devices_here(run.device, limit)
    if have is None or run.nproc <= have:
        return None
    what = "CUDA device(s) visible" if run.device == "cuda" else "device(s) lent (--devices)"
    if run.device == "cuda" and limit is not None:
        what = "CUDA device(s) lent (--devices, or those visible)"
    return f"needs {run.nproc} device(s) per node, {have} {what}"


def why_it_cannot_fit(spec: RunSpec, peak_flops: float | None) -> str | None:
    """The reason ``spec`` cannot run here, with the estimates, or None when it may fit (or
    when nothing can be estimated: a user workload's model is its own)."""
    if spec.config.model is None:
        return None
    need = need_of(spec)
    wanted = need.memory_bytes_per_node()
    have, what = memory_available(spec)
    if wanted > have:
        return (
            f"needs at least {gib(wanted)} per node ({gib(need.state_bytes_per_rank())} of "
            f"parameters, gradients and optimizer state and {gib(need.activation_bytes_per_rank())}"
            f" of activations per rank, {need.ranks_per_node} rank(s)); {what}"
        )
    if peak_flops:
        seconds = need.run_seconds(peak_flops)
        timeout_s = spec.config.run.timeout_s
        if seconds > timeout_s:
            return (
                f"needs at least {duration(seconds)} even at 100 % of the device peak "
                f"({need.repeats:,} repeat(s), {need.tokens_per_step:,.0f} tokens per step); "
                f"timeout_s is {duration(timeout_s)}"
            )
    return None


def nothing_can_run(reasons: list[str], shown: int = 3) -> str:
    """One line for a suite none of whose configurations can run here: each distinct reason
    with how many configurations it stops, the commonest first."""
    from collections import Counter

    counted = Counter(reasons).most_common()
    parts = [f"{n} × {why}" if n > 1 else why for why, n in counted[:shown]]
    if len(counted) > shown:
        parts.append(f"and {len(counted) - shown} other reason(s)")
    return (
        f"none of the {len(reasons)} configurations can run on this machine: "
        + "; ".join(parts)
        + " (--force runs them anyway)"
    )


def check_energy_sources(specs: list[RunSpec]) -> None:
    """MeterUnavailable (exit 2) naming the first forced energy source that cannot measure its
    run here; probes each (device, source) pair once."""
    from greenbench.energy import select_meter

    seen = set()
    for spec in specs:
        c = spec.config
        device, source, nproc = c.run.device, c.energy.source, c.run.nproc
        pair = (device, source)
        if source == "auto" or pair in seen:
            continue
        seen.add(pair)
        if source == "nvml" and device == "cpu":
            raise MeterUnavailable(
                "--energy-source nvml reads GPUs, but this run's device is cpu (it owns no GPU); "
                "use rapl, zeus or auto for a CPU run"
            )
        meter = select_meter(
            device,
            source,
            gpu_indices=list(range(nproc)) if device == "cuda" else [],
            local_rank=0,
        )
        meter.close()


def check_node_meters(specs: list[RunSpec]) -> None:
    """MeterUnavailable (exit 2, nothing run) for a node meter named outright that cannot be
    read here at all (``energy.node=ipmi`` without ipmitool). One that is there but does not
    answer is not refused: its windows say unavailable."""
    from greenbench.energy.node import select_node_meter

    seen: set[tuple[str, str]] = set()
    for spec in specs:
        energy = spec.config.energy
        key = ("off", "") if energy is None else (energy.node, energy.redfish_url)
        if key[0] not in ("ipmi", "redfish") or key in seen:
            continue
        seen.add(key)
        meter = select_node_meter(*key)
        if meter is not None:
            meter.close()
