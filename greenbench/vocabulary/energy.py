"""Where an energy figure came from, and how that is written wherever it is shown.

``energy_source`` is a source a run can name (`greenbench.energy.sources.ENERGY_SOURCES`, which
says of each whether it reads a counter) or a model's, named here; ``energy_measured`` says
whether the figure is a reading of a counter or a model of one (an estimate). An estimate is
never shown, stored or compared as if measured: `energy_label` is the one text every view,
report and verdict uses.

A simulated run (SkipPipe's discrete-event simulator, ``skippipe.mode = "simulate"``) ran on no
device: its energy is modelled from simulated busy and idle seconds at assumed watts, its source
is `SIMULATED_SOURCE` (``model``, never one a run can choose with ``--energy-source``) and its
``runs.simulated`` is true. `is_simulated` tells such rows apart from measurements wherever
results are read; the leaderboard leaves them out.

An emulated GPU (``emulate.gpu``: CPU ranks standing in for GPUs whose NVML is greenbench's power
model, `greenbench.hardware.nvml_model`) reports energy the same way a driver would, but the
figure is the model's: its source is `EMULATED_SOURCE` and it is treated like a simulation
everywhere (`is_simulated`), labelled "emulated (GPU power model)".
"""

from __future__ import annotations

from typing import Any

#: the energy source of a simulated run: a model of simulated seconds, never a reading
SIMULATED_SOURCE = "model"
#: the energy source of an emulated GPU (``emulate.gpu``): the power model answering NVML
EMULATED_SOURCE = "nvml-emulated"
#: energy sources that are models of what would be drawn, never readings of what was
MODELLED_SOURCES = (SIMULATED_SOURCE, EMULATED_SOURCE)
#: a node's own power meter (its BMC), read beside the run's devices (``energy_node_j``)
NODE_SOURCES = ("ipmi", "redfish")


def energy_label(source: object, measured: object) -> str:
    """``"measured (rapl)"`` for a counter reading, ``"simulated (model)"`` for a simulated
    run's modelled energy, ``"emulated (GPU power model)"`` for an emulated GPU's, ``"estimate"``
    for anything else."""
    parts = str(source).split("+")
    if SIMULATED_SOURCE in parts:  # never a reading, whatever the flag says
        return f"simulated ({SIMULATED_SOURCE})"
    if EMULATED_SOURCE in parts:
        return "emulated (GPU power model)"
    if bool(measured):
        return f"measured ({source})"
    return "estimate"


def is_simulated(source: object, simulated: Any = None) -> bool:
    """Whether a result came from a simulation or an emulated GPU: ``runs.simulated`` true
    (NULL, for runs stored before it existed, reads as false), or its energy source a model's
    (`MODELLED_SOURCES`)."""
    try:
        flag = simulated is not None and bool(simulated == simulated) and bool(simulated)
    except TypeError:  # pandas' NA: unknown, as NULL and NaN are
        flag = False
    return flag or any(m in str(source).split("+") for m in MODELLED_SOURCES)
