"""The meters one rank reads over its measured window, from its settings: its own devices' (the
best source that works here, or an emulated GPU's), what its node draws beside them (local rank 0
only: RAPL on a GPU run, the node's BMC, `greenbench.energy.node`), and an emulated GPU's device,
whose model gives each step its time (`greenbench.running.emulated_gpu`).

Under a power limit the GPU meter also samples power, for the window's peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from greenbench.energy.base import EnergyWindow, Meter
from greenbench.running import emulated_gpu
from greenbench.running.emulated_gpu import EmulatedDevice
from greenbench.running.power_limits import requested
from greenbench.settings.runspec import RunSpec


@dataclass(slots=True)
class RankMeters:
    """A rank's own meter, those it reads beside it, and its emulated GPU (None: a real device)."""

    main: Meter
    beside: list[Meter] = field(default_factory=list)
    emulated: EmulatedDevice | None = None

    def begin(self) -> None:
        for m in self.beside:  # quick (a thread starts): the window proper opens last
            m.begin()
        self.main.begin()

    def end(self) -> tuple[EnergyWindow, tuple[EnergyWindow, ...]]:
        window = self.main.end()
        return window, tuple(m.end() for m in self.beside)

    def close(self) -> None:
        for m in (self.main, *self.beside):
            m.close()
        if self.emulated is not None:
            self.emulated.close()


def rank_meters(
    s: dict[str, Any],
    device_type: str,
    device_index: int,
    local_rank: int,
    *,
    workload: str = "",
    rank: int = 0,
) -> RankMeters:
    """The meters of rank ``rank`` of ``workload`` on ``device_type`` (``cpu`` or ``cuda``)
    device ``device_index``."""
    from greenbench.energy import select_meter
    from greenbench.energy.node import beside_meters

    limited = requested(s)
    device = None
    if emulated_gpu.emulated(s):
        device = EmulatedDevice(s, workload, local_rank, rank)
        main: Meter = device.meter(sample_power=limited)
    else:
        main = select_meter(
            s["device"],
            None if s["energy.source"] == "auto" else s["energy.source"],
            gpu_indices=[device_index] if device_type == "cuda" else [],
            local_rank=local_rank,
            sample_power=limited,
        )
    gpu_run = device_type == "cuda" or bool(emulated_gpu.emulated(s))
    beside = beside_meters(
        gpu_run,
        local_rank,
        s.get("energy.node", "off"),
        s.get("energy.redfish_url", ""),
        s.get("energy.node_poll_s", 1.0),
    )
    return RankMeters(main, beside, device)


def check_node_meters(specs: list[RunSpec]) -> None:
    """MeterUnavailable (exit 2, nothing run) for a node meter named outright that cannot be
    read here at all (``energy.node=ipmi`` without ipmitool). One that is there but does not
    answer is not refused: its windows say unavailable."""
    from greenbench.energy.node import select_node_meter

    seen: set[tuple[str, str]] = set()
    for spec in specs:
        s = spec.settings
        key = (s.get("energy.node", "off"), s.get("energy.redfish_url", ""))
        if key[0] not in ("ipmi", "redfish") or key in seen:
            continue
        seen.add(key)
        meter = select_node_meter(*key)
        if meter is not None:
            meter.close()
