"""Where CodeCarbon keeps the data files it ships, and the columns of its ``emissions.csv``,
found without importing CodeCarbon.

We read CodeCarbon's tables (CPU TDPs, carbon intensities) and the source of its
``EmissionsData`` (the columns `greenbench export --format codecarbon` writes) but never import
the package:
``import codecarbon`` probes GPUs, logs warnings and pulls in pandas, and its ``EmissionsTracker``
geolocates over the network. ``importlib.util.find_spec`` locates a top-level package without
executing it, so reading the files stays offline, quiet and fast.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def codecarbon_data_dir() -> Path | None:
    """``<site-packages>/codecarbon/data``, or None when CodeCarbon is not installed."""
    spec = importlib.util.find_spec("codecarbon")
    if spec is None or not spec.submodule_search_locations:
        return None
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    return data if data.is_dir() else None


@lru_cache(maxsize=1)
def codecarbon_version() -> str:
    """Installed CodeCarbon version, for source labels ("codecarbon 3.3.2"); "?" if unknown."""
    try:
        return importlib.metadata.version("codecarbon")
    except importlib.metadata.PackageNotFoundError:
        return "?"


#: the columns of CodeCarbon's ``emissions.csv``, in order: the fields of its ``EmissionsData``
#: (``codecarbon/output_methods/emissions_data.py``) as of CodeCarbon 3.3.2, used only where
#: the installed CodeCarbon's own cannot be read (`emissions_columns`)
EMISSIONS_COLUMNS = (
    "timestamp", "project_name", "run_id", "experiment_id", "duration", "emissions",
    "emissions_rate", "cpu_power", "gpu_power", "ram_power", "cpu_energy", "gpu_energy",
    "ram_energy", "energy_consumed", "water_consumed", "country_name", "country_iso_code",
    "region", "cloud_provider", "cloud_region", "os", "python_version", "codecarbon_version",
    "cpu_count", "cpu_model", "gpu_count", "gpu_model", "longitude", "latitude",
    "ram_total_size", "tracking_mode", "cpu_utilization_percent", "gpu_utilization_percent",
    "ram_utilization_percent", "ram_used_gb", "on_cloud", "pue", "wue",
)  # fmt: skip


@lru_cache(maxsize=1)
def emissions_columns() -> tuple[str, ...]:
    """The columns of the installed CodeCarbon's ``emissions.csv``: the fields of its
    ``EmissionsData`` dataclass, in order, read from its source without importing it (see the
    module docstring); `EMISSIONS_COLUMNS` where CodeCarbon is not installed or that class
    cannot be found."""
    spec = importlib.util.find_spec("codecarbon")
    if spec is None or not spec.submodule_search_locations:
        return EMISSIONS_COLUMNS
    source = Path(next(iter(spec.submodule_search_locations)))
    try:
        tree = ast.parse((source / "output_methods" / "emissions_data.py").read_text("utf-8"))
    except (OSError, SyntaxError, ValueError):
        return EMISSIONS_COLUMNS
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "EmissionsData":
            fields = tuple(
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            )
            return fields or EMISSIONS_COLUMNS
    return EMISSIONS_COLUMNS
