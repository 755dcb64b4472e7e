"""The node's power from its BMC through IPMI DCMI: ``ipmitool dcmi power reading``.

The DCMI "Get Power Reading" command (DCMI specification v1.5, power management) returns the
current, minimum, maximum and average power of the whole platform in watts, with a timestamp, the
sampling period and whether power measurement is active. ipmitool prints it as (``lib/ipmi_dcmi.c``,
``ipmi_dcmi_pwr_rd``)::

    Instantaneous power reading:                   235 Watts
    Minimum during sampling period:                 48 Watts
    Maximum during sampling period:                304 Watts
    Average power reading over sample period:      201 Watts
    IPMI timestamp:                           Thu Feb 15 08:36:01 2024
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated

(other builds align the colons in a column: ``Instantaneous power reading : 235 Watts``; both are
read). The meter polls the instantaneous reading and integrates it (`PolledPowerMeter`). A BMC
that reports the reading state ``deactivated`` with a zero reading has no valid measurement: that
reading fails, and the window says unavailable. In-band only (the kernel's IPMI device on this
node); a BMC reached over the network is what the Redfish meter is for.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import ClassVar

from greenbench.energy.base import Probe
from greenbench.energy.polled import NodeMeterError, PolledPowerMeter, ipmi_device

COMMAND = ("ipmitool", "dcmi", "power", "reading")
TIMEOUT_S = 10.0
_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ]*?)\s*:\s*(?P<value>.*?)\s*$")
_WATTS = re.compile(r"^(\d+(?:\.\d+)?)\s*Watts?$", re.IGNORECASE)
_KEYS = {
    "instantaneous power reading": "instant_w",
    "minimum during sampling period": "min_w",
    "maximum during sampling period": "max_w",
    "average power reading over sample period": "average_w",
}


@dataclass(frozen=True, slots=True)
class DcmiPowerReading:
    """One DCMI power reading, in watts, and whether the BMC says measurement is active."""

    instant_w: float
    min_w: float | None
    max_w: float | None
    average_w: float | None
    active: bool | None  # "Power reading state is: activated" (None: not printed)
    sampling_period: str | None


def parse_dcmi_power(text: str) -> DcmiPowerReading:
    """Parse ``ipmitool dcmi power reading`` output; NodeMeterError when it holds no reading."""
    values: dict[str, float] = {}
    active: bool | None = None
    period: str | None = None
    for line in text.splitlines():
        m = _FIELD.match(line)
        if not m:
            continue
        key, value = m.group("key").lower(), m.group("value")
        if key in _KEYS:
            w = _WATTS.match(value)
            if w:
                values[_KEYS[key]] = float(w.group(1))
        elif key == "power reading state is":
            active = value.lower().startswith("activ")
        elif key == "sampling period":
            period = value
    if "instant_w" not in values:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no output")
        raise NodeMeterError(f"ipmitool printed no power reading ({first[:120]})")
    return DcmiPowerReading(
        values["instant_w"],
        values.get("min_w"),
        values.get("max_w"),
        values.get("average_w"),
        active,
        period,
    )


def read_dcmi(command: tuple[str, ...] = COMMAND, timeout_s: float = TIMEOUT_S) -> float:
    """One instantaneous node power reading in watts, through ipmitool (NodeMeterError)."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise NodeMeterError("ipmitool is not installed") from None
    except subprocess.TimeoutExpired:
        raise NodeMeterError(f"ipmitool did not answer within {timeout_s:g} s") from None
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise NodeMeterError(
            f"ipmitool exited with {done.returncode}: {why[0] if why else 'no message'}"
        )
    reading = parse_dcmi_power(done.stdout)
    if reading.active is False and reading.instant_w == 0:
        raise NodeMeterError("the BMC reports power measurement deactivated (reading 0 W)")
    return reading.instant_w


class IpmiMeter(PolledPowerMeter):
    """The node's power through ``ipmitool dcmi power reading``, polled and integrated."""

    source: ClassVar[str] = "ipmi"

    def __init__(self, *, poll_s: float = 1.0, command: tuple[str, ...] = COMMAND) -> None:
        super().__init__(lambda: read_dcmi(command), poll_s=poll_s)

    @classmethod
    def probe(cls) -> Probe:
        if shutil.which("ipmitool") is None:
            return Probe(cls.source, False, "ipmitool is not installed (apt install ipmitool)")
        try:
            watts = read_dcmi()
        except NodeMeterError as e:
            device = ipmi_device()
            hint = "" if device else " (no IPMI device: modprobe ipmi_si ipmi_devintf, as root)"
            return Probe(cls.source, False, f"DCMI power reading failed: {e}{hint}")
        return Probe(
            cls.source, True, f"the BMC reads {watts:g} W through DCMI", {"power_w": watts}
        )
