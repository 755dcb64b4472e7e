"""The planner's view of one device type: every figure the cost model reads, with its source.

Figures start from the GPU table (`greenbench.hardware.gpus`: datasheet peaks, memory,
bandwidths, board and idle power) and the planner's assumptions (sustained share of peak, busy
power, latencies); a `Calibration` from stored runs replaces what it fitted. Each figure keeps a
text saying where it came from ("datasheet (H100 SXM)", "assumed …", "fitted from 4 runs"), and
the planner prints them, so no prediction hides what it stands on.

Sustained FLOP/s default to an **assumed** 40 % of the dense datasheet peak: torchtitan reports
33–41 % MFU for Llama-3 8B on H100 in bf16, Megatron-LM up to ~47 %, and the 1b preset measured
here 31.5 % (``reference/h100-measured.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from greenbench.errors import SpecError
from greenbench.hardware import gpus
from greenbench.planner.alpha_beta import FAST_ALPHA_S, NETWORK_ALPHA_S, Link
from greenbench.planner.power import BUSY_SHARE_OF_BOARD, Power, under_limit
from greenbench.planner.rates import FamilyRate

SUSTAINED_SHARE_OF_PEAK = 0.40  # assumed (module docstring)
USABLE_MEMORY_SHARE = 0.9  # CUDA context, NCCL buffers and allocator fragmentation take the rest


@dataclass(frozen=True, slots=True)
class Calibration:
    """Figures fitted from stored runs (None: not fitted); ``runs`` counts the runs behind each
    fitted figure, by field name. FLOP/s and watts are per device: per GPU, and per core of a
    CPU host (`greenbench.planner.host` gives each rank its share of cores)."""

    fast: Link | None = None
    network: Link | None = None
    sustained_flops: float | None = None
    busy_w: float | None = None
    idle_w: float | None = None
    runs: dict[str, int] = field(default_factory=dict)
    #: what a reader should know about a fitted figure, by field name (e.g. a link fitted by
    #: bandwidth alone)
    notes: dict[str, str] = field(default_factory=dict)
    #: per family, its matrix products' and its kernel's rates (`greenbench.planner.rates`)
    family_rates: dict[str, FamilyRate] = field(default_factory=dict)
    #: what a process holds besides the predicted tensors (a CPU rank's interpreter and
    #: libraries), fitted from its peak resident set; None: not fitted
    process_overhead_b: float | None = None


@dataclass(frozen=True, slots=True)
class DeviceModel:
    """One device type under the planner's model; ``sources`` says where each figure is from."""

    name: str
    label: str
    peak_flops: float
    sustained_flops: float
    memory_bytes: float
    fast_domain: int
    fast: Link
    network: Link
    power: Power
    power_limit_w: float | None
    sources: dict[str, str]
    #: data-parallel dimensions whose collectives overlap compute (`greenbench.planner.cost`):
    #: both on a GPU; on a CPU host only DDP's (`greenbench.planner.host`)
    overlapped: frozenset[str] = frozenset({"dp_shard", "dp_replicate"})
    #: rates fitted per family (per device), which price its compute in place of
    #: ``sustained_flops`` (`greenbench.planner.cost`)
    rates: dict[str, FamilyRate] = field(default_factory=dict)
    #: bytes a process holds besides the predicted tensors (None: not fitted; a GPU's peak
    #: allocated memory has none)
    process_overhead_b: float | None = None

    @property
    def usable_memory_bytes(self) -> float:
        return self.memory_bytes * USABLE_MEMORY_SHARE


def device_model(
    device_type: str,
    precision: str,
    *,
    power_limit_w: float | None = None,
    calibration: Calibration | None = None,
) -> DeviceModel:
    """The planner's model of ``device_type`` (a short name such as ``h100``, or a reported
    GPU name); SpecError naming the choices when the table does not know it."""
    facts = gpus.gpu_facts(device_type)
    if facts is None:
        raise SpecError(
            f"unknown device type {device_type!r}; choose one of: {', '.join(gpus.DEVICE_TYPES)}"
        )
    if precision not in ("bf16", "fp32"):
        raise SpecError(f"--precision must be bf16 or fp32, got {precision!r}")
    peak = gpus.gpu_peak_flops_of_label(facts.label, precision)
    datasheet = f"datasheet ({facts.label})"
    sources = {
        "peak FLOP/s": f"{datasheet}, dense {precision}",
        "sustained FLOP/s": f"assumed {SUSTAINED_SHARE_OF_PEAK:.0%} of peak",
        "memory": facts.source("memory_bytes"),
        "fast link": f"{datasheet} bandwidth, assumed {FAST_ALPHA_S * 1e6:g} µs latency",
        "network": f"{facts.source('network_bytes_per_s')}, "
        f"assumed {NETWORK_ALPHA_S * 1e6:g} µs latency",
        "busy power": f"assumed {BUSY_SHARE_OF_BOARD:g} × board power",
        "idle power": facts.source("idle_power_w"),
    }
    model = DeviceModel(
        name=device_type,
        label=facts.label,
        peak_flops=peak,
        sustained_flops=peak * SUSTAINED_SHARE_OF_PEAK,
        memory_bytes=facts.memory_bytes,
        fast_domain=facts.fast_domain,
        fast=Link.of_bandwidth(FAST_ALPHA_S, facts.fast_link_bytes_per_s),
        network=Link.of_bandwidth(NETWORK_ALPHA_S, facts.network_bytes_per_s),
        power=Power(facts.board_power_w * BUSY_SHARE_OF_BOARD, facts.idle_power_w),
        power_limit_w=power_limit_w,
        sources=sources,
    )
    if calibration is not None:
        model = _calibrated(model, calibration)
    power = under_limit(
        model.power.busy_w,
        model.power.idle_w,
        power_limit_w,
        min_limit_w=facts.min_power_limit_w,
        board_power_w=facts.board_power_w,
    )
    sources = dict(model.sources)
    if power_limit_w is not None:
        sources["power limit"] = (
            f"{power_limit_w:g} W: busy power capped, compute × {power.slowdown:.3f} (assumed "
            "clock ∝ power^(1/3))"
        )
    return replace(model, power=power, sources=sources)


def _calibrated(model: DeviceModel, c: Calibration) -> DeviceModel:
    sources = dict(model.sources)

    def fitted(what: str, key: str) -> None:
        n = c.runs.get(key, 0)
        sources[what] = f"fitted from {n} stored run{'s' if n != 1 else ''} on this host"
        if key in c.notes:
            sources[what] += f"; {c.notes[key]}"

    changes: dict = {}
    if c.fast is not None:
        changes["fast"] = c.fast
        fitted("fast link", "fast")
    if c.network is not None:
        changes["network"] = c.network
        fitted("network", "network")
    if c.sustained_flops is not None:
        changes["sustained_flops"] = c.sustained_flops
        fitted("sustained FLOP/s", "sustained_flops")
    if c.family_rates:
        changes["rates"] = dict(c.family_rates)
        for family, rate in sorted(c.family_rates.items()):
            sources[f"{family} FLOP/s"] = rate_source(rate)
    busy = c.busy_w if c.busy_w is not None else model.power.busy_w
    idle = c.idle_w if c.idle_w is not None else model.power.idle_w
    if c.busy_w is not None:
        fitted("busy power", "busy_w")
    if c.idle_w is not None:
        fitted("idle power", "idle_w")
    return replace(model, power=Power(busy, idle), sources=sources, **changes)


def rate_source(rate: FamilyRate, per: str = "") -> str:
    """Where a family's rates come from, for the sources table."""
    note = f"; {rate.note}" if rate.note else ""
    return (
        f"fitted from {rate.runs} single-process or data-parallel run"
        f"{'s' if rate.runs != 1 else ''} of {rate.family} ({rate.kernel} kernel){per}{note}"
    )
