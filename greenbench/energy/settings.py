"""The ``energy`` section (which meter, the carbon region, the idle window, the node's own
meter) and the ``gpu`` section (a GPU power limit to apply)."""

from __future__ import annotations

from typing import Any

from greenbench.config import ALWAYS, NEVER, NON_NEGATIVE, POSITIVE, Config, section, setting, when
from greenbench.energy.sources import SOURCE_CHOICES
from greenbench.errors import SpecError

#: the longest idle window: a longer one only delays the run (its power is averaged over it)
MAX_IDLE_S = 60.0
#: how long a quiet idle baseline is reused by default (`greenbench.launcher.idle`)
IDLE_MAX_AGE_S = 600.0


@section("energy", "Where a run's joules come from, and its carbon.")
class EnergySettings:
    source: str = setting(
        "auto",
        "where the run's joules come from (auto: the best this machine has)",
        choices=SOURCE_CHOICES,
        identity=ALWAYS,
    )
    region: str = setting(
        "world",
        "ISO-3 country code or cloud region for carbon intensity",
        identity=ALWAYS,
    )
    idle_s: float = setting(
        1.0,
        "idle-power sampling window before the suite (0 disables)",
        bound=NON_NEGATIVE,
        identity=NEVER,
    )
    idle_max_age_s: float = setting(
        IDLE_MAX_AGE_S,
        "seconds an idle baseline taken on a quiet machine is reused, by later configurations "
        "and later runs on this machine (0: sampled for every configuration)",
        bound=NON_NEGATIVE,
        identity=NEVER,
    )
    node: str = setting(
        "auto",
        "the node's own power meter, stored beside the run's devices as energy_node_j: auto "
        "(IPMI DCMI where ipmitool answers, Redfish where energy.redfish_url is set) | off | "
        "ipmi | redfish",
        choices=("auto", "off", "ipmi", "redfish"),
        identity=NEVER,
    )
    redfish_url: str = setting(
        "",
        "a Redfish Power or EnvironmentMetrics resource of this node's BMC (credentials: "
        "$GREENBENCH_REDFISH_USER, $GREENBENCH_REDFISH_PASSWORD, never stored)",
        identity=NEVER,
    )
    node_poll_s: float = setting(
        1.0, "seconds between node meter readings", bound=POSITIVE, identity=NEVER
    )

    def check(self, config: Config) -> None:
        from greenbench.energy.carbon import carbon_intensity_g_per_kwh

        if self.idle_s > MAX_IDLE_S:
            raise SpecError(
                f"energy.idle_s={self.idle_s:g} is longer than {MAX_IDLE_S:g} s: a longer "
                "idle window only delays the run (its power is averaged over the window)"
            )
        carbon_intensity_g_per_kwh(self.region)  # SpecError for an unknown region
        url = self.redfish_url
        if url and not url.startswith(("http://", "https://")):
            raise SpecError(f"energy.redfish_url must be an http:// or https:// URL, got {url!r}")
        if self.node == "redfish" and not url:
            raise SpecError(
                "energy.node=redfish needs energy.redfish_url (the BMC's Power or "
                "EnvironmentMetrics resource)"
            )


def _limit_fraction(s: Any) -> bool:
    """A power limit given as a fraction counts until the launcher turns it into the watts
    applied (``gpu.power_limit_w``), which then stand for it: the same watts are one
    configuration however they were asked for."""
    return (s.get("gpu.power_limit_frac") or 0) > 0 and not (s.get("gpu.power_limit_w") or 0) > 0


@section("gpu", "A GPU power limit, set before the warm-up and always restored.")
class GpuSettings:
    power_limit_w: float = setting(
        0.0,
        "GPU power limit in watts (0: the device's own limit, untouched); set through NVML as "
        "root or through zeusd; the watts applied are part of the identity",
        bound=NON_NEGATIVE,
        identity=when(lambda s: (s.get("gpu.power_limit_w") or 0) > 0),
    )
    power_limit_frac: float = setting(
        0.0,
        "GPU power limit as a fraction of the default limit (at most one of the two)",
        bound=NON_NEGATIVE,
        identity=when(_limit_fraction),
    )

    def check(self, config: Config) -> None:
        watts, fraction = self.power_limit_w, self.power_limit_frac
        if watts > 0 and fraction > 0:
            raise SpecError(
                "set at most one of gpu.power_limit_w (watts) and gpu.power_limit_frac (a "
                "fraction of the default limit)"
            )
        if (watts > 0 or fraction > 0) and not config.emulate.gpu and config.run.device == "cpu":
            raise SpecError(
                "a GPU power limit (gpu.power_limit_w or gpu.power_limit_frac) needs GPUs, and "
                "this run's device is cpu: use --device cuda, or emulate.gpu=h100 to try it on "
                "an emulated GPU"
            )
