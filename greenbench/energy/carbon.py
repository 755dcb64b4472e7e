"""Offline carbon intensity (gCO2eq/kWh) of a region, from the data CodeCarbon ships.

Regions:
- an ISO-3 country code ("FRA", "USA", …): ``data/private_infra/global_energy_mix.json``,
  2023 figures from Our World in Data;
- a cloud region "provider:region" ("gcp:us-central1"): ``data/cloud/impact.csv``;
- "world": ``carbon_intensity_per_source.json`` ``world_average`` (IEA 2019), the value CodeCarbon
  uses when a country is missing.

We read CodeCarbon's files instead of calling CodeCarbon because its ``EmissionsTracker``
geolocates over the network and silently assumes a US location when that fails; greenbench's
figures must not depend on the network. Nothing here opens a socket.
"""

from __future__ import annotations

import csv
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from greenbench.energy._codecarbon import codecarbon_data_dir, codecarbon_version
from greenbench.errors import SpecError

JOULES_PER_KWH = 3.6e6

_HOW_TO_FIND = (
    "use an ISO-3 country code (e.g. FRA, USA, DEU), 'world', or a cloud region such as "
    "'gcp:us-central1'; `python -c \"from greenbench.energy.carbon import known_regions; "
    'print(known_regions())"` lists every valid code'
)


def _data_dir() -> Path:
    data = codecarbon_data_dir()
    if data is None:
        raise SpecError(
            "carbon intensity needs CodeCarbon's shipped data, but codecarbon is not installed: "
            "pip install codecarbon"
        )
    return data


@lru_cache(maxsize=1)
def _energy_mix() -> dict[str, dict[str, Any]]:
    path = _data_dir() / "private_infra" / "global_energy_mix.json"
    return json.loads(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _per_source() -> dict[str, Any]:
    path = _data_dir() / "private_infra" / "carbon_intensity_per_source.json"
    return json.loads(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _cloud_regions() -> dict[str, float]:
    path = _data_dir() / "cloud" / "impact.csv"
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8-sig", newline="") as f:
        return {
            f"{row['provider'].strip().lower()}:{row['region'].strip().lower()}": float(
                row["impact"]
            )
            for row in csv.DictReader(f)
            if row.get("impact")
        }


def known_regions() -> list[str]:
    """Every region code :func:`carbon_intensity_g_per_kwh` accepts, sorted."""
    return ["world", *sorted(_energy_mix()), *sorted(_cloud_regions())]


def carbon_intensity_g_per_kwh(region: str) -> tuple[float, str]:
    """Carbon intensity of ``region`` in gCO2eq/kWh, and a label naming where it came from.

    Raises SpecError for an unknown region, saying how to find a valid code.
    """
    key = region.strip()
    label_head = f"codecarbon {codecarbon_version()}"
    if key.lower() == "world":
        data = _per_source()
        return float(data["world_average"]), (
            f"{label_head} carbon_intensity_per_source.json world_average "
            f"({data.get('world_average_source', 'IEA 2019')})"
        )
    if ":" in key:
        cloud = _cloud_regions()
        if key.lower() in cloud:
            return cloud[key.lower()], f"{label_head} cloud/impact.csv ({key.lower()})"
        raise SpecError(f"unknown cloud region {region!r} for carbon intensity: {_HOW_TO_FIND}")
    mix = _energy_mix()
    entry = mix.get(key.upper())
    if entry is None or entry.get("carbon_intensity") is None:
        raise SpecError(f"unknown region {region!r} for carbon intensity: {_HOW_TO_FIND}")
    name = entry.get("country_name", key.upper())
    year = entry.get("year", "?")
    return float(entry["carbon_intensity"]), (
        f"{label_head} global_energy_mix.json ({name}, {year})"
    )


def country_name(iso3: str) -> str | None:
    """The country name CodeCarbon's energy mix gives an ISO-3 code ("FRA" → "France"); None
    for a code it does not list, or where CodeCarbon is not installed."""
    if codecarbon_data_dir() is None:
        return None
    entry = _energy_mix().get(iso3.strip().upper())
    name = entry.get("country_name") if entry else None
    return str(name) if name else None


def co2_g(energy_j: float | None, intensity_g_per_kwh: float) -> float | None:
    """Grams of CO2eq for ``energy_j`` joules at ``intensity_g_per_kwh``; None if energy unknown."""
    if energy_j is None:
        return None
    return energy_j / JOULES_PER_KWH * intensity_g_per_kwh
