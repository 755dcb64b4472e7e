"""The node's own meters (greenbench.energy.ipmi, .redfish, .polled, .node): readings parsed from
outputs in the documented formats, ipmitool faked at the command boundary (a script of that name
on PATH), Redfish at the HTTP boundary (a local server answering DMTF-mockup-shaped resources),
and an unreachable meter labelled unavailable, never a silent zero."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from greenbench.energy.ipmi import IpmiMeter, parse_dcmi_power, read_dcmi
from greenbench.energy.node import beside_meters, doctor_probes, select_node_meter
from greenbench.energy.polled import NodeMeterError, PolledPowerMeter
from greenbench.energy.redfish import (
    RedfishMeter,
    linked_power_resource,
    power_reading_w,
)
from greenbench.errors import MeterUnavailable

FIXTURES = Path(__file__).parent / "fixtures"

#: as ipmitool's lib/ipmi_dcmi.c prints it (ipmi_dcmi_pwr_rd, "%8d Watts")
DCMI_IPMITOOL = """
    Instantaneous power reading:                   235 Watts
    Minimum during sampling period:                 48 Watts
    Maximum during sampling period:                304 Watts
    Average power reading over sample period:      201 Watts
    IPMI timestamp:                           Thu Feb 15 08:36:01 2024
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated

"""
#: the aligned-colon layout of other builds
DCMI_ALIGNED = """
    Instantaneous power reading              : 214      Watts
    Minimum during sampling period           : 2        Watts
    Maximum during sampling period           : 468      Watts
    Average power reading over sample period : 184      Watts
    IPMI timestamp                           : 2024-05-05 13:06:44 UTC
    Sampling period                          : 1000 Milliseconds
    Power reading state is                   : activated
"""
DCMI_DEACTIVATED = DCMI_IPMITOOL.replace("235 Watts", "0 Watts").replace("activated", "deactivated")


def test_dcmi_readings_parse_in_both_layouts():
    r = parse_dcmi_power(DCMI_IPMITOOL)
    assert (r.instant_w, r.min_w, r.max_w, r.average_w, r.active) == (235, 48, 304, 201, True)
    assert r.sampling_period == "00000001 Seconds."
    r = parse_dcmi_power(DCMI_ALIGNED)
    assert (r.instant_w, r.average_w, r.active) == (214, 184, True)
    assert parse_dcmi_power(DCMI_DEACTIVATED).active is False


def test_output_without_a_reading_is_an_error():
    with pytest.raises(NodeMeterError, match="no power reading"):
        parse_dcmi_power("Could not open device at /dev/ipmi0 or /dev/ipmi/0\n")


@pytest.fixture
def ipmitool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An ``ipmitool`` on PATH that prints ``output.txt`` and exits with ``code.txt``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ipmitool"
    script.write_text(
        f'#!/bin/sh\necho "$@" >> {tmp_path}/calls.txt\ncat {tmp_path}/output.txt\n'
        f"exit $(cat {tmp_path}/code.txt)\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")

    def answer(output: str, code: int = 0) -> Path:
        (tmp_path / "output.txt").write_text(output)
        (tmp_path / "code.txt").write_text(str(code))
        return tmp_path / "calls.txt"

    return answer


def test_ipmitool_is_asked_for_a_dcmi_power_reading(ipmitool):
    calls = ipmitool(DCMI_IPMITOOL)
    assert read_dcmi() == 235
    assert calls.read_text().split() == ["dcmi", "power", "reading"]
    ipmitool(DCMI_DEACTIVATED)
    with pytest.raises(NodeMeterError, match="deactivated"):
        read_dcmi()
    ipmitool("", code=1)
    with pytest.raises(NodeMeterError, match="exited with 1"):
        read_dcmi()


def test_the_ipmi_meter_integrates_the_node_s_power(ipmitool):
    ipmitool(DCMI_IPMITOOL)
    meter = IpmiMeter(poll_s=0.05)
    meter.begin()
    time.sleep(0.3)
    w = meter.end()
    assert w.source == "ipmi" and w.measured
    assert w.energy_j == pytest.approx(235 * w.seconds, rel=1e-6)
    assert len(w.samples) >= 2 and {s.component for s in w.samples} == {"node"}
    assert IpmiMeter.probe().available


def test_an_ipmi_meter_that_stops_answering_is_unavailable_never_zero(ipmitool):
    ipmitool("", code=1)
    meter = IpmiMeter(poll_s=0.05)
    meter.begin()
    time.sleep(0.1)
    w = meter.end()
    assert w.energy_j is None and w.note.startswith("unavailable: ipmitool exited with 1")
    assert not IpmiMeter.probe().available


def test_a_reading_failing_mid_window_makes_the_whole_window_unavailable():
    readings = iter([300.0, 310.0])

    def read() -> float:
        return next(readings)  # then StopIteration: the third reading fails

    meter = PolledPowerMeter(read, poll_s=0.02)
    meter.begin()
    time.sleep(0.15)
    w = meter.end()
    assert w.energy_j is None and "unavailable" in w.note  # never a partial sum


def test_redfish_resources_in_the_dmtf_mockup_shapes_parse():
    environment = json.loads((FIXTURES / "redfish_environment_metrics.json").read_text())
    power = json.loads((FIXTURES / "redfish_power.json").read_text())
    chassis = json.loads((FIXTURES / "redfish_chassis.json").read_text())
    assert power_reading_w(environment) == 412
    assert power_reading_w(power) == 356
    assert power_reading_w(chassis) is None
    assert linked_power_resource(chassis) == "/redfish/v1/Chassis/1U/EnvironmentMetrics"
    environment["PowerWatts"]["Reading"] = None  # a BMC that does not measure
    assert power_reading_w(environment) is None


class Bmc:
    """A Redfish service on localhost serving the fixtures, optionally behind basic auth."""

    def __init__(self) -> None:
        self.routes = {
            "/redfish/v1/Chassis/1U": "redfish_chassis.json",
            "/redfish/v1/Chassis/1U/Power": "redfish_power.json",
            "/redfish/v1/Chassis/1U/EnvironmentMetrics": "redfish_environment_metrics.json",
        }
        self.auth: str | None = None
        self.requests: list[str] = []
        bmc = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                bmc.requests.append(self.path)
                if bmc.auth and self.headers.get("Authorization") != bmc.auth:
                    self.send_error(401, "Unauthorized")
                    return
                name = bmc.routes.get(self.path)
                if name is None:
                    self.send_error(404, "Not Found")
                    return
                body = (FIXTURES / name).read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def bmc() -> Iterator[Bmc]:
    server = Bmc()
    yield server
    server.server.shutdown()


def read_window(meter: PolledPowerMeter, seconds: float = 0.25):
    meter.begin()
    time.sleep(seconds)
    return meter.end()


@pytest.mark.parametrize(
    ("path", "watts"),
    [("/EnvironmentMetrics", 412), ("/Power", 356), ("", 412)],  # "": the chassis, followed
)
def test_the_redfish_meter_reads_power_over_http(bmc, path, watts):
    w = read_window(RedfishMeter(f"{bmc.url}/redfish/v1/Chassis/1U{path}", poll_s=0.05))
    assert w.source == "redfish" and w.energy_j == pytest.approx(watts * w.seconds, rel=1e-6)


def test_redfish_credentials_come_from_the_environment(bmc, monkeypatch):
    bmc.auth = "Basic " + base64.b64encode(b"admin:secret").decode()
    url = f"{bmc.url}/redfish/v1/Chassis/1U/Power"
    w = read_window(RedfishMeter(url, poll_s=0.05))
    assert w.energy_j is None and "HTTP 401" in w.note and "GREENBENCH_REDFISH_USER" in w.note
    monkeypatch.setenv("GREENBENCH_REDFISH_USER", "admin")
    monkeypatch.setenv("GREENBENCH_REDFISH_PASSWORD", "secret")
    assert read_window(RedfishMeter(url, poll_s=0.05)).energy_j is not None


def test_an_unreachable_or_silent_bmc_is_unavailable(bmc):
    bmc.server.shutdown()
    bmc.server.server_close()
    w = read_window(RedfishMeter(f"{bmc.url}/redfish/v1/Chassis/1U/Power", timeout_s=1))
    assert w.energy_j is None and "unreachable" in w.note
    probe = RedfishMeter.probe_url(f"{bmc.url}/redfish/v1/Chassis/1U")
    assert not probe.available and "unreachable" in probe.reason


def test_a_resource_without_power_is_named(bmc):
    bmc.routes["/redfish/v1/Chassis/1U"] = "redfish_chassis.json"
    bmc.routes["/redfish/v1/Chassis/1U/EnvironmentMetrics"] = "redfish_chassis.json"
    w = read_window(RedfishMeter(f"{bmc.url}/redfish/v1/Chassis/1U/EnvironmentMetrics"))
    assert w.energy_j is None and "holds no power reading" in w.note


def test_selection(monkeypatch, bmc):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert select_node_meter("off") is None
    assert select_node_meter("auto") is None  # nothing on this node
    assert isinstance(select_node_meter("auto", bmc.url), RedfishMeter)
    with pytest.raises(MeterUnavailable, match="ipmitool is not installed"):
        select_node_meter("ipmi")
    assert beside_meters(True, 1, "auto", bmc.url) == []  # only local rank 0 reads the node
    probes = {p.source: p for p in doctor_probes(f"{bmc.url}/redfish/v1/Chassis/1U")}
    assert probes["redfish"].available and "412 W" in probes["redfish"].reason
    assert not probes["ipmi"].available
