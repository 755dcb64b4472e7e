"""Power-limit sweeps (greenbench.reporting.limit_sweep) and the report's section on them
(greenbench.reporting.power_limits): grouping, the front, the knee, Zeus's choices checked
against Zeus's own selectors, and an emulated sweep headed as a model."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta

import pandas as pd
import pytest

from greenbench.reporting.limit_sweep import (
    MAX_SLOWDOWN,
    base_name,
    sweep_key,
    sweeps,
    zeus_cost_choice,
    zeus_slowdown_choice,
)
from greenbench.reporting.power_limits import markdown, plot
from greenbench.vocabulary import EMULATED_SOURCE

#: (limit W, tokens/s, J/token): an H100-like sweep (the model's shape, tokens/s of the 125m
#: Transformer measured in reference/h100-measured.md)
H100_SWEEP = [(700, 96000, 0.00656), (595, 94200, 0.00632), (490, 88300, 0.00555),
              (385, 81500, 0.00473)]  # fmt: skip


def repeat_rows(
    points,
    *,
    family: str = "transformer",
    source: str = "nvml",
    repeats: int = 3,
    spread: float = 0.002,
) -> pd.DataFrame:
    """One row per repeat of each limit's run; the repeats' tokens/s spread by ±``spread``."""
    start = datetime(2026, 1, 1)
    rows = []
    for i, (limit, tps, jpt) in enumerate(points):
        settings = {"model.family": family, "model.size": "125m", "gpu.power_limit_w": limit,
                    "gpu.power_limit_frac": round(limit / 700, 2), "seed": 0}  # fmt: skip
        for k in range(repeats):
            rows.append({
                "run_id": f"{family}{i}", "config": json.dumps({"settings": settings}),
                "config_name": f"{family}/125m seq=1024 fixed single×1 limit={limit}W",
                "workload": "power-limit", "started_at": start + timedelta(minutes=i),
                "repeat": k, "device_type": "NVIDIA H100 80GB HBM3", "nproc": 1, "nnodes": 1,
                "energy_source": source, "energy_measured": source == "nvml",
                "power_limit_w": float(limit), "power_limit_default_w": 700.0,
                "tokens_per_s": tps * (1 + spread * (k - 1)), "joules_per_token": jpt,
                "gpu_power_avg_w": min(limit, 630.0), "gpu_power_peak_w": min(limit, 640.0),
                "energy_node_j": None, "tokens": 1000,
            })  # fmt: skip
    return pd.DataFrame(rows)


def test_one_sweep_per_configuration_without_its_limit():
    rows = pd.concat([repeat_rows(H100_SWEEP), repeat_rows(H100_SWEEP, family="mamba")])
    found = sweeps(rows)
    assert [s.name for s in found] == [
        "mamba/125m seq=1024 fixed single×1",
        "transformer/125m seq=1024 fixed single×1",
    ]
    (t,) = [s for s in found if s.name.startswith("transformer")]
    assert list(t.table["limit_w"]) == [700, 595, 490, 385]
    assert t.table["repeats"].tolist() == [3] * 4 and t.energy == "measured (nvml)"
    assert sweep_key({"settings": {"seed": 0, "gpu.power_limit_w": 490}}, "w") == sweep_key(
        {"settings": {"seed": 0, "gpu.power_limit_w": 700}}, "w"
    )
    assert base_name("x/125m limit=490W single×1") == "x/125m single×1"


def test_the_knee_is_the_lowest_j_per_token_within_ten_percent_of_full_speed():
    (sweep,) = sweeps(repeat_rows(H100_SWEEP))
    t = sweep.table.set_index("limit_w")
    assert t.loc[490, "slowdown"] == pytest.approx(96000 / 88300)
    assert sweep.knee_w == 490  # 385 W saves more but is 17.8 % slower
    assert t.loc[385, "slowdown"] > MAX_SLOWDOWN >= t.loc[490, "slowdown"]
    assert t["on_front"].all()  # every step down trades time for energy here
    assert sweep.zeus_slowdown_w == 490


def test_a_limit_that_is_slower_and_costlier_is_off_the_front():
    points = [*H100_SWEEP[:3], (385, 80000, 0.0070)]
    (sweep,) = sweeps(repeat_rows(points))
    assert not sweep.table.set_index("limit_w").loc[385, "on_front"]


def test_a_single_limit_is_no_sweep_and_measured_and_emulated_are_never_one():
    assert sweeps(repeat_rows(H100_SWEEP[:1])) == []
    rows = pd.concat(
        [repeat_rows(H100_SWEEP[:2]), repeat_rows(H100_SWEEP[2:], source=EMULATED_SOURCE)]
    )
    found = sweeps(rows)
    assert {s.energy for s in found} == {"measured (nvml)", "emulated (GPU power model)"}
    assert all(len(s.table) == 2 for s in found)
    assert found[0].measured and not found[1].measured  # measured sweeps first


def test_zeus_choices_agree_with_zeus_s_own_selectors():
    """ZeusCost(η, world_size) and MaxSlowdownConstraint(factor) as Zeus implements them
    (zeus.optimizer.power_limit), on random sweeps."""
    from zeus.optimizer.power_limit import MaxSlowdownConstraint, PowerLimitMeasurement, ZeusCost

    rng = random.Random(16)
    for _ in range(200):
        limits = rng.sample(range(200, 701, 25), rng.randint(2, 8))
        energy = [rng.uniform(100, 1000) for _ in limits]
        time = [rng.uniform(1, 10) for _ in limits]
        eta, world = rng.choice([0.0, 0.3, 0.5, 1.0]), rng.randint(1, 8)
        measured = [
            PowerLimitMeasurement(power_limit=w, energy=e, time=t)
            for w, e, t in zip(limits, energy, time, strict=True)
        ]
        assert zeus_cost_choice(limits, energy, time, eta=eta, world_size=world) == ZeusCost(
            eta, world
        ).select(measured)
        assert zeus_slowdown_choice(limits, time, 1.1) == MaxSlowdownConstraint(1.1).select(
            measured
        )


def test_the_section_names_the_knee_and_zeus_s_choice_and_says_how_it_was_computed():
    (sweep,) = sweeps(repeat_rows(H100_SWEEP))
    text = "\n".join(markdown(sweep))
    assert "**Knee: 490 W**" in text and "-15.4% J/token" in text
    assert "Zeus's GlobalPowerLimitOptimizer would choose" in text
    assert "computed here with Zeus's published cost metric from this sweep" in text
    assert "not a measurement" not in text


def test_an_emulated_sweep_is_headed_as_a_model():
    (sweep,) = sweeps(repeat_rows(H100_SWEEP, source=EMULATED_SOURCE))
    text = "\n".join(markdown(sweep))
    assert "energy emulated (GPU power model)" in text
    assert "These figures come from a model, not a measurement" in text


#: a sweep drawn on a busy machine: each lower limit far faster than the one above, which no GPU
#: does (a lower limit lowers the clock)
INVERTED = [(700, 81, 0.0091), (595, 118, 0.0072), (490, 159, 0.0050), (385, 236, 0.0026)]


def test_a_sweep_whose_time_falls_with_the_limit_is_inconsistent_and_names_no_knee(tmp_path):
    (sweep,) = sweeps(repeat_rows(INVERTED))
    assert not sweep.consistent
    assert (sweep.knee_w, sweep.zeus_cost_w, sweep.zeus_slowdown_w) == (None, None, None)
    assert not sweep.table["on_front"].any()  # no front is drawn through an impossible curve
    text = "\n".join(markdown(sweep))
    assert "Inconsistent sweep" in text and "595 W" in text and "700 W" in text
    assert "Knee" not in text and "would choose" not in text
    plot([sweep], tmp_path / "p.png")  # drawn without a front or a knee
    assert (tmp_path / "p.png").stat().st_size > 10_000


def test_one_lower_limit_faster_beyond_its_noise_is_enough():
    points = [H100_SWEEP[0], (595, 99000, 0.00632), *H100_SWEEP[2:]]  # 3 % faster than 700 W
    (sweep,) = sweeps(repeat_rows(points))
    assert not sweep.consistent and sweep.knee_w is None
    (why,) = sweep.inconsistencies
    assert why.startswith("at 595 W training took 3.0% less time per token than at 700 W")


def test_a_lower_limit_faster_only_within_the_repeats_noise_is_consistent():
    # 595 W's median 1.5 % faster than 700 W's, each limit's repeats spread ±2 %: noise
    points = [H100_SWEEP[0], (595, 97440, 0.00632), *H100_SWEEP[2:]]
    (sweep,) = sweeps(repeat_rows(points, spread=0.02))
    assert sweep.consistent and sweep.knee_w == 490
    # the same medians with repeats that agree to ±0.1 %: still within the tolerance
    (sweep,) = sweeps(repeat_rows(points, spread=0.001))
    assert sweep.consistent and sweep.knee_w == 490
