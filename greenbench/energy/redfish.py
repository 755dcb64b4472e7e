"""The node's power from its BMC through Redfish (DMTF DSP0266), over HTTP(S).

Two resources carry a chassis's power, and the meter reads either (DMTF schemas
``EnvironmentMetrics`` v1.3 and ``Power`` v1.7, as the DMTF's public mockups show them, e.g.
``public-rackmount1`` at ``/redfish/v1/Chassis/1U/…`` in DMTF/Redfish-Mockup-Server):

* ``EnvironmentMetrics`` (current schema): ``PowerWatts.Reading``, watts.
* ``Power`` (deprecated in favour of it, still what many BMCs serve): ``PowerControl[i].
  PowerConsumedWatts``, the first member that has one.

Given a ``Chassis`` resource instead, the meter follows its ``EnvironmentMetrics`` link, else its
``Power`` link, once. A reading that is missing or null (a BMC that does not measure) fails, and
the window says unavailable. ``EnergykWh``, where a BMC has it, counts in kilowatt-hours (3.6 MJ a
step on many BMCs), far too coarse for a window of minutes, so the meter polls power
(`PolledPowerMeter`) instead.

Credentials come from ``$GREENBENCH_REDFISH_USER`` and ``$GREENBENCH_REDFISH_PASSWORD`` (HTTP
basic authentication), never from settings, which are stored with every run. HTTPS is verified
against the system's certificate store (``SSL_CERT_FILE`` names another), as urllib does.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, ClassVar

from greenbench.energy.base import Probe
from greenbench.energy.polled import NodeMeterError, PolledPowerMeter

TIMEOUT_S = 5.0
USER_ENV, PASSWORD_ENV = "GREENBENCH_REDFISH_USER", "GREENBENCH_REDFISH_PASSWORD"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def power_reading_w(doc: dict[str, Any]) -> float | None:
    """The watts an EnvironmentMetrics or Power resource reports, or None when it has none."""
    power = doc.get("PowerWatts")
    if isinstance(power, dict) and _number(power.get("Reading")) is not None:
        return _number(power["Reading"])
    for member in doc.get("PowerControl") or []:
        if isinstance(member, dict) and _number(member.get("PowerConsumedWatts")) is not None:
            return _number(member["PowerConsumedWatts"])
    return None


def linked_power_resource(doc: dict[str, Any]) -> str | None:
    """A Chassis resource's link to its EnvironmentMetrics (preferred) or Power resource."""
    for name in ("EnvironmentMetrics", "Power"):
        link = doc.get(name)
        if isinstance(link, dict) and isinstance(link.get("@odata.id"), str):
            return link["@odata.id"]
    return None


def describe(doc: dict[str, Any]) -> str:
    kind = doc.get("@odata.type") or doc.get("@odata.id") or "the resource"
    return (
        f"{kind} holds no power reading (PowerWatts.Reading or PowerControl[].PowerConsumedWatts)"
    )


class RedfishClient:
    """GETs of JSON resources from one BMC (basic auth from the environment)."""

    def __init__(self, timeout_s: float = TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV, "")
        self._auth = (
            "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode() if user else None
        )

    def get(self, url: str) -> dict[str, Any]:
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self._auth:
            request.add_header("Authorization", self._auth)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                doc = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            hint = f" (set {USER_ENV} and {PASSWORD_ENV})" if e.code in (401, 403) else ""
            raise NodeMeterError(f"Redfish {url} answered HTTP {e.code} {e.reason}{hint}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise NodeMeterError(f"Redfish {url} unreachable: {reason}") from None
        except (ValueError, UnicodeDecodeError) as e:
            raise NodeMeterError(f"Redfish {url} did not answer JSON: {e}") from None
        if not isinstance(doc, dict):
            raise NodeMeterError(f"Redfish {url} answered JSON that is not an object")
        return doc


def resolve_power_url(url: str, client: RedfishClient) -> str:
    """``url`` if it reports power, else the power resource its Chassis links to."""
    doc = client.get(url)
    if power_reading_w(doc) is not None:
        return url
    link = linked_power_resource(doc)
    if link is None:
        raise NodeMeterError(f"Redfish {url}: {describe(doc)}")
    return urllib.parse.urljoin(url, link)


def read_power_w(url: str, client: RedfishClient) -> float:
    """One node power reading in watts from the resource at ``url`` (NodeMeterError)."""
    doc = client.get(url)
    watts = power_reading_w(doc)
    if watts is None:
        raise NodeMeterError(f"Redfish {url}: {describe(doc)}")
    return watts


class RedfishMeter(PolledPowerMeter):
    """The node's power from a Redfish EnvironmentMetrics or Power resource, polled."""

    source: ClassVar[str] = "redfish"

    def __init__(self, url: str, *, poll_s: float = 1.0, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url
        self._client = RedfishClient(timeout_s)
        self._resolved: str | None = None
        super().__init__(self._read, poll_s=poll_s)

    def _read(self) -> float:
        if self._resolved is None:
            self._resolved = resolve_power_url(self.url, self._client)
        return read_power_w(self._resolved, self._client)

    @classmethod
    def probe(cls) -> Probe:
        return Probe(cls.source, False, "no Redfish endpoint given")

    @classmethod
    def probe_url(cls, url: str) -> Probe:
        """One reading from ``url`` (nothing else is asked of the BMC)."""
        client = RedfishClient()
        try:
            resolved = resolve_power_url(url, client)
            watts = read_power_w(resolved, client)
        except NodeMeterError as e:
            return Probe(cls.source, False, str(e))
        return Probe(
            cls.source, True, f"{resolved} reads {watts:g} W", {"url": resolved, "power_w": watts}
        )
