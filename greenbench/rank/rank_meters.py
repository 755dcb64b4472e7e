"""The meters one rank reads over its measured window, from its settings: its own devices' (the
best source that works here, or an emulated GPU's), what its node draws beside them (local rank 0
only: RAPL on a GPU run, the node's BMC, `greenbench.energy.node`), and an emulated GPU's device,
whose model gives each step its time (`greenbench.rank.emulated_gpu`).

Under a power limit the GPU meter also samples power, for the window's peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from greenbench.energy.base import EnergyWindow, Meter
from greenbench.energy.settings import GpuSettings
from greenbench.rank import emulated_gpu
from greenbench.rank.emulated_gpu import EmulatedDevice
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


def limit_requested(gpu: GpuSettings | None) -> bool:
    """Whether a configuration's GPU section asks for a power limit (its GPU meter then samples
    power); a configuration without one asks for none."""
    return gpu is not None and ((gpu.power_limit_w or 0) > 0 or (gpu.power_limit_frac or 0) > 0)


def rank_meters(
    spec: RunSpec,
    device_type: str,
    device_index: int,
    local_rank: int,
    *,
    rank: int = 0,
) -> RankMeters:
    """The meters of rank ``rank`` of ``spec``'s run on ``device_type`` (``cpu`` or ``cuda``)
    device ``device_index``."""
    from greenbench.energy import select_meter
    from greenbench.energy.node import beside_meters

    config = spec.config
    energy = config.energy
    limited = limit_requested(config.gpu)
    gpu = emulated_gpu.emulated(spec)
    device = None
    if gpu:
        device = EmulatedDevice(spec, local_rank, rank)
        main: Meter = device.meter(sample_power=limited)
    else:
        main = select_meter(
            config.run.device,
            None if energy.source == "auto" else energy.source,
            gpu_indices=[device_index] if device_type == "cuda" else [],
            local_rank=local_rank,
            sample_power=limited,
        )
    gpu_run = device_type == "cuda" or bool(gpu)
    beside = beside_meters(gpu_run, local_rank, energy.node, energy.redfish_url, energy.node_poll_s)
    return RankMeters(main, beside, device)
