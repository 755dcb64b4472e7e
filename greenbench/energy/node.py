"""What a node draws beyond the run's own devices: its own power meter (the BMC, through IPMI DCMI
or Redfish) and, on GPU runs, its CPU and DRAM through RAPL. Read by local rank 0 over the same
window as the run's meter, stored beside ``energy_j`` (``energy_node_j``, and ``energy_cpu_j`` /
``energy_dram_j`` on a GPU run), never added into it: ``energy_j`` stays what the run's devices
drew.

A BMC reports power, not energy, so a node meter polls it and integrates the readings over the
window (`greenbench.energy.polled`). A meter that cannot be read makes the window's energy None
with the reason in its note: unavailable, never a silent zero.

Selection (``energy.node``): ``off``; ``ipmi``; ``redfish`` (needs ``energy.redfish_url``); ``auto``
reads Redfish where a URL is given, else IPMI where ``ipmitool`` is installed and the kernel's
IPMI device exists, else nothing (most machines: workstations, VMs, this project's CI).
"""

from __future__ import annotations

import shutil

from greenbench.energy.base import Meter, Probe
from greenbench.energy.ipmi import IpmiMeter
from greenbench.energy.polled import ipmi_device
from greenbench.energy.rapl import RaplMeter
from greenbench.energy.redfish import RedfishMeter
from greenbench.errors import MeterUnavailable, SpecError


def select_node_meter(choice: str, redfish_url: str = "", poll_s: float = 1.0) -> Meter | None:
    """The node meter ``energy.node`` asks for (module docstring), or None for none.

    An explicit choice that cannot be read here at all (``ipmi`` without ipmitool) is
    MeterUnavailable; one that fails later reads as unavailable in its windows."""
    if choice == "off":
        return None
    if choice == "redfish" or (choice == "auto" and redfish_url):
        if not redfish_url:
            raise SpecError("energy.node=redfish needs energy.redfish_url")
        return RedfishMeter(redfish_url, poll_s=poll_s)
    if choice == "ipmi":
        if shutil.which("ipmitool") is None:
            raise MeterUnavailable("energy.node=ipmi: ipmitool is not installed here")
        return IpmiMeter(poll_s=poll_s)
    if choice == "auto" and shutil.which("ipmitool") and ipmi_device():
        return IpmiMeter(poll_s=poll_s)
    return None


def beside_meters(
    gpu_run: bool, local_rank: int, node: str, redfish_url: str = "", poll_s: float = 1.0
) -> list[Meter]:
    """The meters local rank 0 reads beside the run's own: RAPL on a GPU run where it is
    readable, and the node meter ``node`` selects. Other ranks read none (one per node)."""
    if local_rank != 0:
        return []
    meters: list[Meter] = []
    if gpu_run and RaplMeter.probe().available:
        meters.append(RaplMeter())
    node_meter = select_node_meter(node, redfish_url, poll_s)
    if node_meter is not None:
        meters.append(node_meter)
    return meters


def doctor_probes(redfish_url: str = "") -> list[Probe]:
    """What this node offers beyond its devices' meters: IPMI DCMI and Redfish (one reading each
    where configured; nothing changes)."""
    probes = [IpmiMeter.probe()]
    if redfish_url:
        probes.append(RedfishMeter.probe_url(redfish_url))
    else:
        probes.append(
            Probe(
                "redfish",
                False,
                "no Redfish endpoint given (greenbench doctor --redfish-url URL, or the "
                "energy.redfish_url setting of a run)",
            )
        )
    return probes
