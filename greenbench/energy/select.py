"""Which meter a rank uses: the best source that really works here, or the one forced.

Order (the best source that exists here):
- cuda runs: ``nvml`` (energy counter, else power polling), then ``zeus``'s GPU reading. Each rank
  reads the GPUs it owns (``gpu_indices``). There is no GPU estimate: a cuda run without a GPU
  source fails with the probes' reasons. CPU energy is not added on cuda runs, for every source
  alike, so cuda results stay comparable across sources.
- cpu runs: ``rapl`` read directly, then ``zeus`` (which reaches RAPL through zeusd or a
  container mount), then the ``estimate``.

The sources, and how each makes a rank's meter, are `greenbench.energy.sources.ENERGY_SOURCES`.
CPU-side sources (rapl, zeus on cpu, estimate) read the whole node, so only local rank 0 gets
the real meter; other ranks get a :class:`~greenbench.energy.ranks.NullMeter` (energy 0.0,
same source label), and summing ranks gives the node total once. The estimate uses the
machine-wide CPU load for the same reason: rank 0's reading covers every rank on the node.

``auto_source`` and ``explain_choices`` are pure functions of probes, shared by ``select_meter``
and ``greenbench doctor`` so that the doctor says exactly what a run would do.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from greenbench.energy.base import Meter, Probe
from greenbench.energy.sources import ENERGY_SOURCES, MeterRequest, ProbeFn, zeus_count
from greenbench.errors import MeterUnavailable, SpecError


def _normalise_device(device: str) -> str:
    kind = device.split(":", 1)[0].strip().lower()
    if kind not in ("cpu", "cuda"):
        raise SpecError(f"unknown device {device!r}: use cpu or cuda")
    return kind


def auto_source(device: str, probe: ProbeFn) -> tuple[str | None, str]:
    """(source, why) an automatic choice makes on ``device``; source None when nothing fits."""
    device = _normalise_device(device)
    if device == "cuda":
        nv = probe("nvml")
        if nv.available:
            return "nvml", f"NVML: {nv.reason}"
        ze = probe("zeus")
        if zeus_count(ze, "gpus"):
            return "zeus", f"NVML unavailable ({nv.reason}); zeus: {ze.reason}"
        return None, (
            f"no GPU energy source: nvml: {nv.reason}; zeus: {ze.reason}. Install the NVIDIA "
            "driver and nvidia-ml-py, or force --energy-source estimate (CPU estimate only)"
        )
    ra = probe("rapl")
    if ra.available:
        return "rapl", f"RAPL: {ra.reason}"
    ze = probe("zeus")
    if zeus_count(ze, "cpus"):
        return "zeus", f"RAPL not directly readable ({ra.reason}); zeus: {ze.reason}"
    return "estimate", (
        f"no CPU energy counter (rapl: {ra.reason}; zeus: {ze.reason}), so a TDP × load "
        "estimate, not a measurement"
    )


def select_meter(
    device: str,
    forced: str | None,
    *,
    gpu_indices: Sequence[int] = (),
    local_rank: int = 0,
    probe: ProbeFn | None = None,
    sample_power: bool = False,
) -> Meter:
    """The meter this rank uses on ``device`` ("cpu", "cuda", "cuda:1").

    ``forced`` is the ``--energy-source`` value or None for automatic. ``gpu_indices`` are the
    CUDA devices this rank owns. Raises SpecError for an unknown source name and
    MeterUnavailable (one line, with the probe's reason) when the source cannot work here.
    ``probe`` replaces ``ENERGY_SOURCES[name].probe()`` (tests). ``sample_power``: NVML also samples
    power on counter devices (for the window's peak).
    """
    kind = _normalise_device(device)
    probe_fn = probe or cache(lambda name: ENERGY_SOURCES[name].probe())
    if forced is None:
        name, why = auto_source(kind, probe_fn)
        if name is None:
            raise MeterUnavailable(why)
    else:
        name = forced.strip().lower()
        if name not in ENERGY_SOURCES:
            choices = ", ".join(ENERGY_SOURCES)
            raise SpecError(f"unknown energy source {forced!r}: choose one of {choices}")
        p = probe_fn(name)
        if not p.available:
            raise MeterUnavailable(f"--energy-source {name} is not available here: {p.reason}")
    request = MeterRequest(
        kind, probe_fn, tuple(gpu_indices), local_rank=local_rank, sample_power=sample_power
    )
    return ENERGY_SOURCES[name].make(request)


def doctor_report() -> list[Probe]:
    """One probe per registered source, in registry order."""
    return [source.probe() for source in ENERGY_SOURCES.values()]


def cuda_device_names() -> list[str]:
    """Names of the CUDA devices torch sees ([] without torch or without CUDA)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def describe_cuda(names: Sequence[str]) -> str:
    """One line about the CUDA devices, e.g. "2 CUDA device(s): 0 NVIDIA H100, 1 NVIDIA H100"."""
    if not names:
        return "no CUDA device (torch.cuda.device_count() == 0): --device cuda is unavailable"
    listed = ", ".join(f"{i} {n}" for i, n in enumerate(names))
    return f"{len(names)} CUDA device(s): {listed}"


def explain_choices(probes: Sequence[Probe], cuda_names: Sequence[str]) -> dict[str, str]:
    """What an automatic cpu run and cuda run would measure with, and why (for the doctor)."""
    by_name = {p.source: p for p in probes}

    def probe(name: str) -> Probe:
        return by_name.get(name) or Probe(name, False, "not probed")

    out: dict[str, str] = {}
    for device in ("cpu", "cuda"):
        if device == "cuda" and not cuda_names:
            out[device] = f"cuda run: impossible here ({describe_cuda(cuda_names)})"
            continue
        name, why = auto_source(device, probe)
        head = f"{device} run: {name}" if name else f"{device} run: no energy source"
        out[device] = f"{head} — {why}"
    return out
