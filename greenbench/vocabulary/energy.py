"""Where an energy figure came from, and how that is written wherever it is shown.

``energy_source`` is one of `SOURCES`; ``energy_measured`` says whether the figure is a reading
of a counter (nvml, zeus, rapl) or a model of one (estimate). An estimate is never shown, stored
or compared as if measured: `energy_label` is the one text every view, report and verdict uses.
"""

from __future__ import annotations

#: every energy source a run can name (``--energy-source``), best first
SOURCES = ("nvml", "zeus", "rapl", "estimate")
#: sources that read a hardware counter
MEASURED_SOURCES = ("nvml", "zeus", "rapl")


def energy_label(source: object, measured: object) -> str:
    """``"measured (rapl)"`` for a counter reading, ``"estimate"`` for anything else."""
    return f"measured ({source})" if bool(measured) else "estimate"
