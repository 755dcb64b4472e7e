"""The CPU host as the planner's device (``--device-type host``): ranks of this host's stored CPU
runs, each rank one "device" with its share of the cores, so the planner can be checked here,
on runs it can measure, and not only on GPUs it has no runs of.

What a rank of the host is, in the planner's terms:

* its cores: a rank runs ``max(1, cores // ranks)`` intra-op threads (the launcher's
  `threads_per_rank`), and when ranks outnumber cores each runs under a CPU quota of
  ``cores / ranks`` (`greenbench.launcher.cpu_quota`; without quotas, ranks sharing cores get the
  same share on average). So a rank computes on ``min(max(1, cores // ranks), cores / ranks)``
  cores (`cores_per_rank`), and its sustained FLOP/s are that many times one core's. One core's
  figure is what a calibration fits (`greenbench.planner.calibrate`, from the ranks' FLOPs over
  their compute seconds); uncalibrated it is **assumed** at `SUSTAINED_SHARE_OF_GEMM` of the
  stored GEMM calibration (`peak_flops` of the runs, per thread);
* its memory: the host's memory over its ranks (for "fits"; the compared figure is the model
  state, `greenbench.planner.memory`);
* its links: every rank is on this host, so one link (gloo over loopback and shared memory)
  serves every group. gloo's copies and reductions are CPU work, so a rank transfers at the pace
  of its cores: α and β are fitted per core from the runs' communication records and divided
  by the rank's cores here; until they are fitted they are **assumed** (`ASSUMED_ALPHA_S`,
  `ASSUMED_BYTES_PER_S`);
* what overlaps: DDP's gloo all-reduce runs on its own thread while backward computes, so its
  time hides behind compute as on a GPU; FSDP2's collectives block the step on CPU (no streams
  to prefetch on), so they add to it (`OVERLAPPED`);
* its compute per model family, where the calibration fitted rates for it
  (`greenbench.planner.rates`): the matrix products and the family's kernel at their own
  per-core rates, times the rank's cores;
* its power: the estimate meter's model, CodeCarbon's ``TDP × (0.1 + 0.9 · load³)`` on this
  machine's TDP (`greenbench.energy.host_power`), the rank's share of it: busy at full load,
  idle at 10 %. An **assumption** like the estimate itself; energy measured by counters, where a
  host has them, replaces it through the calibration. No power limit applies.

Facts come from the stored runs (``runs.hardware``: logical cores, memory, CPU model; the GEMM
peak), so the device is the host the runs came from; the TDP is read from this machine, which
is that host (`calibrate.stored_runs` reads this host's runs only).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from greenbench.errors import SpecError
from greenbench.planner.alpha_beta import Link
from greenbench.planner.device import Calibration, DeviceModel, rate_source
from greenbench.planner.power import Power

HOST = "host"  #: the --device-type that names this host's CPU
SUSTAINED_SHARE_OF_GEMM = 0.6  # assumed until calibrated
ASSUMED_ALPHA_S = 100e-6  # assumed gloo latency per call on one host
ASSUMED_BYTES_PER_S = 2e9  # assumed gloo bandwidth on one host
IDLE_SHARE_OF_TDP = 0.1  # CodeCarbon's load model at zero load
OVERLAPPED = frozenset({"dp_replicate"})  #: data-parallel dims whose collectives hide on CPU


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What the stored runs say about their host."""

    host: str
    device_type: str  # runs.device_type, "cpu:<model>"
    cores: int  # logical cores
    memory_bytes: float
    gemm_flops_per_core: float | None  # the runs' GEMM calibration, per thread
    tdp_w: float
    tdp_source: str


def threads_per_rank(cores: int, ranks: int) -> int:
    """Intra-op threads the launcher gives each of ``ranks`` ranks on ``cores`` cores."""
    return max(1, cores // ranks)


def cores_per_rank(cores: int, ranks: int) -> float:
    """Cores one of ``ranks`` ranks computes on (module docstring)."""
    return min(float(threads_per_rank(cores, ranks)), cores / ranks)


def run_cores(run: dict[str, Any]) -> int | None:
    """The logical cores of the host ``run`` (a `get_run` dict) ran on, if it says."""
    n = (run.get("hardware") or {}).get("logical_cores")
    return int(n) if n else None


def host_facts(runs: list[dict[str, Any]]) -> HostFacts:
    """The host of ``runs`` (ok CPU runs of one host, `get_run` dicts); SpecError when there
    are none or they name no core count."""
    if not runs:
        raise SpecError("no CPU run of this host is stored: run a workload here first")
    from greenbench.energy.host_power import host_cpu_tdp

    cores = [n for n in map(run_cores, runs) if n]
    if not cores:
        raise SpecError("the stored CPU runs do not record the host's logical cores")
    hardware = [r.get("hardware") or {} for r in runs]
    memory = [float(h["memory_bytes"]) for h in hardware if h.get("memory_bytes")]
    gemm = [
        float(r["peak_flops"]) / threads_per_rank(n, int(r["nproc"]))
        for r in runs
        if r.get("peak_flops") and (n := run_cores(r))
    ]
    tdp = host_cpu_tdp(logical_cpus=max(cores))
    types = [str(r["device_type"]) for r in runs]
    return HostFacts(
        host=str(runs[0].get("host")),
        device_type=max(set(types), key=types.count),
        cores=max(set(cores), key=cores.count),
        memory_bytes=statistics.median(memory) if memory else float("inf"),
        gemm_flops_per_core=statistics.median(gemm) if gemm else None,
        tdp_w=tdp.tdp_w,
        tdp_source=tdp.source,
    )


def host_device(
    facts: HostFacts,
    ranks: int,
    *,
    calibration: Calibration | None = None,
    power_limit_w: float | None = None,
) -> DeviceModel:
    """One of ``ranks`` ranks of the host as the planner's device. A calibration's
    ``sustained_flops`` is one core's (`greenbench.planner.calibrate`)."""
    if power_limit_w is not None:
        raise SpecError("--power-limit-w is a GPU power limit: the host's CPU takes none")
    c = calibration or Calibration()
    share = cores_per_rank(facts.cores, ranks)
    threads = threads_per_rank(facts.cores, ranks)
    split = f"{share:g} of {facts.cores} cores per rank ({threads} thread(s)" + (
        f", a CPU quota of {facts.cores}/{ranks})" if ranks > facts.cores else ")"
    )

    def fitted(key: str) -> str:
        n = c.runs.get(key, 0)
        note = f"; {c.notes[key]}" if key in c.notes else ""
        return f"fitted from {n} stored run{'s' if n != 1 else ''} on this host{note}"

    gemm = facts.gemm_flops_per_core
    sources = {
        "peak FLOP/s": f"GEMM calibration of the stored runs, {split}"
        if gemm
        else "unknown: the stored runs hold no GEMM calibration",
    }
    if c.sustained_flops is not None:
        per_core = c.sustained_flops
        sources["sustained FLOP/s"] = f"{fitted('sustained_flops')}, per core × {share:g}"
    elif gemm:
        per_core = gemm * SUSTAINED_SHARE_OF_GEMM
        sources["sustained FLOP/s"] = f"assumed {SUSTAINED_SHARE_OF_GEMM:.0%} of the GEMM peak"
    else:
        raise SpecError(
            "the host's sustained FLOP/s are unknown: no GEMM calibration is stored with its "
            "runs; pass --calibrate to fit them from the runs"
        )
    if c.fast is not None:  # fitted per core: a rank with fewer cores transfers slower
        link = Link(c.fast.alpha_s / share, c.fast.beta_s_per_byte / share)
    else:
        link = Link.of_bandwidth(ASSUMED_ALPHA_S, ASSUMED_BYTES_PER_S)
    sources["memory"] = f"the host's {facts.memory_bytes / 1e9:,.1f} GB over {ranks} rank(s)"
    sources["fast link"] = (
        fitted("fast")
        if c.fast is not None
        else f"assumed gloo on one host: {ASSUMED_ALPHA_S * 1e6:g} µs, "
        f"{ASSUMED_BYTES_PER_S / 1e9:g} GB/s"
    )
    sources["network"] = "none: every rank is on this host (the fast link's figures)"
    tdp_share = facts.tdp_w * share / facts.cores
    if c.busy_w is not None and c.idle_w is not None:
        power = Power(c.busy_w * share, c.idle_w * share)
        sources["busy power"] = f"{fitted('busy_w')}, per core × {share:g}"
        sources["idle power"] = f"{fitted('idle_w')}, per core × {share:g}"
    else:
        power = Power(tdp_share, tdp_share * IDLE_SHARE_OF_TDP)
        basis = f"TDP {facts.tdp_w:g} W ({facts.tdp_source}) × {share:g}/{facts.cores} cores"
        sources["busy power"] = f"assumed: the estimate meter's full load, {basis}"
        sources["idle power"] = f"assumed: the estimate meter's zero load (10 %), {basis}"
    for family, rate in sorted(c.family_rates.items()):
        sources[f"{family} FLOP/s"] = rate_source(rate, f", per core × {share:g}")
    sources["overlap"] = (
        "assumed: DDP's all-reduce hides behind backward (its own gloo thread); FSDP2's "
        "collectives, tp, cp and pp add to the step"
    )
    return DeviceModel(
        name=HOST,
        label=facts.device_type,
        peak_flops=(gemm or per_core) * share,
        sustained_flops=per_core * share,
        memory_bytes=facts.memory_bytes / ranks,
        fast_domain=ranks,
        fast=link,
        network=link,
        power=power,
        power_limit_w=None,
        sources=sources,
        overlapped=OVERLAPPED,
        rates={family: rate.scaled(share) for family, rate in c.family_rates.items()},
        process_overhead_b=c.process_overhead_b,
    )
