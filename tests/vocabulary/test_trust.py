"""The trust model: what each stored signal reads as, and the one way every view writes it."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats as sps

from greenbench.stats import median_ci
from greenbench.vocabulary.trust import (
    CONTENDED,
    IDLE_MARK,
    IDLE_UNRELIABLE,
    PEAK_MARK,
    Trust,
    energy_kind,
    idle_problem,
    interval_caption,
    interval_for,
    peak_kind,
    repeats_for_interval,
)


def test_a_95_percent_interval_needs_six_repeats_as_the_median_ci_says() -> None:
    need = repeats_for_interval()
    assert need == 6
    # the extremes of n values cover the median with 1 - 2 * 0.5**n: just short below 6
    assert 1 - 2 * sps.binom.cdf(0, need - 1, 0.5) < 0.95 <= 1 - 2 * sps.binom.cdf(0, need, 0.5)
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert median_ci(xs)[1:] == (1.0, 5.0)  # what stats draws below 6 is the range


@pytest.mark.parametrize(
    ("n", "kind", "name", "short"),
    [
        (0, "none", "no interval", "no repeats"),
        (1, "single", "no interval", "1 repeat"),
        (2, "range", "min–max range", "min–max of 2"),
        (5, "range", "min–max range", "min–max of 5"),
        (6, "ci", "95 % CI", ""),
        (30, "ci", "95 % CI", ""),
    ],
)
def test_the_interval_each_repeat_count_allows(n: int, kind: str, name: str, short: str) -> None:
    interval = interval_for(n)
    assert (interval.kind, interval.name, interval.short) == (kind, name, short)
    if kind in ("range", "single"):
        assert "needs ≥ 6 repeats" in interval.note


def test_a_caption_names_what_is_drawn() -> None:
    assert interval_caption([2, 3]).startswith("min–max range")
    assert "CI" in interval_caption([2]) and "not a CI" in interval_caption([2])
    assert interval_caption([6, 9]) == "95 % CI of the median"
    assert "else the min–max range" in interval_caption([2, 8])


def test_energy_kinds() -> None:
    assert energy_kind("rapl", True) == "measured"
    assert energy_kind("estimate", False) == "estimated"
    assert energy_kind("model", False) == "simulated"
    assert energy_kind("nvml-emulated", False) == "emulated"
    assert energy_kind("estimate", False, simulated=True) == "simulated"


def test_peak_kinds() -> None:
    assert peak_kind("datasheet:H100 SXM bf16") == "datasheet"
    assert peak_kind("cpu-gemm-calibration") == "calibration"
    assert peak_kind(None) is None and peak_kind(float("nan")) is None


def test_a_clean_run_has_no_markers_and_a_contended_one_says_how_busy_in_counts() -> None:
    clean = Trust.of(
        {"energy_source": "rapl", "energy_measured": True, "contended": False,
         "idle_power_w": 10.0, "idle_note": "", "n_repeats": 7}
    )  # fmt: skip
    assert clean.markers() == () and clean.mark() == "" and clean.details() == []
    busy = Trust.of(
        {"energy_source": "estimate", "energy_measured": False, "contended": True,
         "others_busy_cores": 1.3, "other_greenbench": 2, "n_repeats": 2}
    )  # fmt: skip
    assert busy.markers() == (CONTENDED, "min–max of 2")
    assert busy.mark() == f"{CONTENDED} · min–max of 2"
    text = busy.details()[0]
    assert "1.30 cores busy" in text and "2 other greenbench processes" in text
    assert busy.energy == "estimate" and busy.energy_kind == "estimated"


def test_unknown_values_read_as_unknown_never_as_clean_or_contended() -> None:
    old = Trust.of(pd.Series({"contended": None, "others_busy_cores": math.nan}), n_repeats=6)
    assert old.contention.contended is None and not old.contended
    assert "contention not recorded" in old.summary()
    na = Trust.of({"contended": pd.NA, "other_greenbench": pd.NA, "idle_power_w": pd.NA})
    assert na.contention.contended is None and na.idle.state == "none"


def test_a_pooled_row_counts_its_contended_runs() -> None:
    row = {"n_runs": 3, "n_contended_runs": 1, "others_busy_cores": 0.8, "n_repeats": 9}
    trust = Trust.of(row)
    assert trust.contended and "(1 of 3 runs)" in trust.contention.text
    assert trust.markers() == (CONTENDED,)


def test_an_unreliable_idle_baseline_and_a_differing_peak_are_marked() -> None:
    note = f"{IDLE_UNRELIABLE}: idle power sampled while other processes kept 1.00 core busy"
    trust = Trust.of(
        {"idle_power_w": 30.0, "idle_note": note, "peak_flops_source": "cpu-gemm-calibration",
         "peak_consistent": False, "peak_note": "stored 1.04e10, machine's 4.21e10",
         "n_repeats": 6}
    )  # fmt: skip
    assert trust.markers() == (IDLE_MARK, PEAK_MARK)
    assert trust.idle.text == f"net energy unknown: {note}"
    assert any("machine's 4.21e10" in d for d in trust.details())
    pooled = Trust.of({"idle_power_w": 30.0, "n_idle_unreliable": 2, "n_repeats": 6})
    assert pooled.idle.state == "unreliable"


def test_the_idle_rule() -> None:
    assert idle_problem(None, 100.0, 2.0) == ""
    assert idle_problem(40.0, 100.0, 2.0) == ""  # 40 W idle under a 50 W window
    above = idle_problem(60.0, 100.0, 2.0)
    assert above.startswith(IDLE_UNRELIABLE) and "above the window's mean power 50 W" in above
    sampled = idle_problem(10.0, 100.0, 2.0, "sampled while 1 other greenbench process ran")
    assert sampled == f"{IDLE_UNRELIABLE}: sampled while 1 other greenbench process ran"
