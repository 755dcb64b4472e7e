"""Where CodeCarbon keeps the data files it ships, found without importing CodeCarbon.

We read CodeCarbon's tables (CPU TDPs, carbon intensities) but never import the package:
``import codecarbon`` probes GPUs, logs warnings and pulls in pandas, and its ``EmissionsTracker``
geolocates over the network. ``importlib.util.find_spec`` locates a top-level package without
executing it, so reading the files stays offline, quiet and fast.
"""

from __future__ import annotations

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
