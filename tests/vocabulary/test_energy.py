"""The energy label: where a figure came from, simulated runs included."""

from __future__ import annotations

import math

import pandas as pd

from greenbench.energy.sources import SOURCE_NAMES
from greenbench.vocabulary import SIMULATED_SOURCE, energy_label, is_simulated


def test_labels_say_measured_estimate_or_simulated():
    assert energy_label("rapl", True) == "measured (rapl)"
    assert energy_label("estimate", False) == "estimate"
    assert energy_label("model", False) == "simulated (model)"
    assert energy_label("estimate+model", False) == "simulated (model)"
    assert energy_label("model", True) == "simulated (model)"  # never a reading


def test_a_run_cannot_choose_the_simulators_source():
    assert SIMULATED_SOURCE == "model" and SIMULATED_SOURCE not in SOURCE_NAMES


def test_simulated_by_flag_or_by_source_and_null_reads_false():
    assert is_simulated("model") and is_simulated("rapl", True)
    for unknown in (None, math.nan, pd.NA, False):
        assert not is_simulated("rapl", unknown)


def test_an_emulated_gpu_s_energy_is_never_a_measurement():
    from greenbench.vocabulary import EMULATED_SOURCE

    assert energy_label(EMULATED_SOURCE, True) == "emulated (GPU power model)"
    assert energy_label(EMULATED_SOURCE, False) == "emulated (GPU power model)"
    assert is_simulated(EMULATED_SOURCE) and is_simulated(f"{EMULATED_SOURCE}+rapl")
    assert not is_simulated("nvml")
