"""Offline carbon intensity from CodeCarbon's shipped data."""

from __future__ import annotations

import socket

import pytest

from greenbench.energy import carbon
from greenbench.energy.carbon import carbon_intensity_g_per_kwh, co2_g, known_regions
from greenbench.errors import SpecError


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any socket opened while these tests run fails them: the data must be offline."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("carbon intensity tried to use the network")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for cached in (carbon._energy_mix, carbon._per_source, carbon._cloud_regions):
        cached.cache_clear()


def test_france() -> None:
    value, label = carbon_intensity_g_per_kwh("FRA")
    assert value == pytest.approx(56.0, abs=0.1)
    assert "global_energy_mix.json" in label and "France" in label and "2023" in label
    assert carbon_intensity_g_per_kwh("fra")[0] == value


def test_other_countries_from_reference_table() -> None:
    assert carbon_intensity_g_per_kwh("USA")[0] == pytest.approx(369.5, abs=0.1)
    assert carbon_intensity_g_per_kwh("SWE")[0] == pytest.approx(40.7, abs=0.1)


def test_world_average() -> None:
    value, label = carbon_intensity_g_per_kwh("world")
    assert value == 475.0
    assert "world_average" in label


def test_cloud_region() -> None:
    value, label = carbon_intensity_g_per_kwh("gcp:us-central1")
    assert value == 430.0
    assert "impact.csv" in label


@pytest.mark.parametrize("region", ["XXX", "France", "gcp:nowhere-1", ""])
def test_unknown_region_raises_with_help(region: str) -> None:
    with pytest.raises(SpecError, match="ISO-3 country code") as err:
        carbon_intensity_g_per_kwh(region)
    assert "known_regions" in str(err.value)


def test_known_regions() -> None:
    regions = known_regions()
    assert {"world", "FRA", "USA", "gcp:us-central1"} <= set(regions)
    assert len(regions) > 200


def test_co2() -> None:
    assert co2_g(3.6e6, 100.0) == pytest.approx(100.0)  # 1 kWh at 100 g/kWh
    assert co2_g(1000.0, 56.0) == pytest.approx(1000.0 / 3.6e6 * 56.0)
    assert co2_g(None, 56.0) is None
