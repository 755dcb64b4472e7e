"""Where an energy figure came from, and how that is written wherever it is shown.

``energy_source`` is one of `SOURCES`; ``energy_measured`` says whether the figure is a reading
of a counter (nvml, zeus, rapl) or a model of one (estimate). An estimate is never shown, stored
or compared as if measured: `energy_label` is the one text every view, report and verdict uses.

A simulated run (SkipPipe's discrete-event simulator, ``skippipe.mode = "simulate"``) ran on no
device: its energy is modelled from simulated busy and idle seconds at assumed watts, its source
is `SIMULATED_SOURCE` (``model``, never one a run can choose with ``--energy-source``) and its
``runs.simulated`` is true. `is_simulated` tells such rows apart from measurements wherever
results are read; the leaderboard leaves them out.
"""

from __future__ import annotations

from typing import Any

#: every energy source a run can name (``--energy-source``), best first
SOURCES = ("nvml", "zeus", "rapl", "estimate")
#: sources that read a hardware counter
MEASURED_SOURCES = ("nvml", "zeus", "rapl")
#: the energy source of a simulated run: a model of simulated seconds, never a reading
SIMULATED_SOURCE = "model"


def energy_label(source: object, measured: object) -> str:
    """``"measured (rapl)"`` for a counter reading, ``"simulated (model)"`` for a simulated
    run's modelled energy, ``"estimate"`` for anything else."""
    if SIMULATED_SOURCE in str(source).split("+"):  # never a reading, whatever the flag says
        return f"simulated ({SIMULATED_SOURCE})"
    if bool(measured):
        return f"measured ({source})"
    return "estimate"


def is_simulated(source: object, simulated: Any = None) -> bool:
    """Whether a result came from a simulation: ``runs.simulated`` true (NULL, for runs stored
    before it existed, reads as false), or its energy source the simulator's own."""
    try:
        flag = simulated is not None and bool(simulated == simulated) and bool(simulated)
    except TypeError:  # pandas' NA: unknown, as NULL and NaN are
        flag = False
    return flag or SIMULATED_SOURCE in str(source).split("+")
