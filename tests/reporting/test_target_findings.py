"""greenbench.reporting.target_findings: what runs to a target say is computed, whichever way it
goes: SkipPipe cheaper, dearer or "cannot tell" against the straggler-aware full pipeline; the
family that reaches the target first and with the least energy (or none); DDP/FSDP/ODC losses
agreeing at equal steps, or not."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from target_helpers import (
    CURVE,
    FAST,
    SLOW,
    TargetRun,
    as_rows,
    curve_rows,
    seeds,
    skippipe_runs,
)

from greenbench.reporting.target_findings import (
    DATA_PARALLEL,
    FAMILY_KEYS,
    SAME_LOSS_RTOL,
    SCHEDULE,
    SKIP,
    STRATEGY_KEYS,
    Spread,
    Verdict,
    compare,
    curve_findings,
    family_findings,
    same_but,
    skippipe_findings,
)
from greenbench.reporting.to_target import seed_rows, target_board

#: overlapping FAST in time and energy
NEAR = [(True, 11.0, 110.0, 0), (True, 13.0, 130.0, 0)]


def board_of(runs: list[TargetRun]) -> pd.DataFrame:
    return target_board(seed_rows(as_rows(runs)))


def test_compare_is_less_or_more_only_where_intervals_do_not_overlap():
    a, b = Spread(10.0, 9.0, 11.0, 2), Spread(20.0, 19.0, 21.0, 2)
    assert compare(a, b) == Verdict("less") and compare(b, a) == Verdict("more")
    near = Spread(11.5, 10.5, 12.0, 2)
    assert compare(a, near) == Verdict("cannot tell", "the intervals overlap")
    assert compare(Spread(10.0, 10.0, 10.0, 1), b).why.startswith("one seed has no interval")
    never = Spread(math.inf, math.inf, math.inf, 2)
    assert compare(never, never).why == "no seed of either reached the target"
    assert compare(a, never) == Verdict("less")  # reached against never reached


@pytest.mark.parametrize(
    ("skip", "aware", "time", "energy", "said"),
    [
        (FAST, SLOW, "less", "less", "**less time and less energy**"),
        (SLOW, FAST, "more", "more", "**more time and more energy**"),
        (NEAR, FAST, "cannot tell", "cannot tell", "cannot tell (the intervals overlap)"),
    ],
)
def test_skippipe_against_the_straggler_aware_full_pipeline_whichever_way(
    skip: list, aware: list, time: str, energy: str, said: str
):
    found = skippipe_findings(board_of(skippipe_runs(skip, aware)))
    assert len(found) == 1
    f = found[0]
    assert (f.time.word, f.joules.word) == (time, energy)
    text = "\n".join(f.lines())
    assert said in text
    assert "SkipPipe skip=0.5" in text and "slow=2×3" in text
    assert "straggler-aware full pipeline: " in text


def test_skippipe_faster_but_not_leaner_is_said_apart():
    # reaches it sooner, but its energy intervals overlap the baseline's
    skip = [(True, 10.0, 190.0, 0), (True, 12.0, 230.0, 0)]
    f = skippipe_findings(board_of(skippipe_runs(skip, SLOW)))[0]
    assert (f.time.word, f.joules.word) == ("less", "cannot tell")
    assert "**less time**, **cannot tell (the intervals overlap)**" in "\n".join(f.lines())


def test_skippipe_without_its_baseline_says_nothing():
    runs = [r for r in skippipe_runs(FAST, SLOW) if not r.run_id.startswith("aware")]
    assert skippipe_findings(board_of(runs)) == []


def test_skippipe_that_never_reached_is_dearer_than_a_baseline_that_did():
    never = [(False, 60.0, 600.0, 4.4), (False, 60.0, 600.0, 4.5)]
    f = skippipe_findings(board_of(skippipe_runs(never, FAST)))[0]
    assert (f.time.word, f.joules.word) == ("more", "more")
    assert "not reached (best 4.4)" in "\n".join(f.lines())


def test_the_family_that_reaches_first_and_leanest():
    # each family's own kernel setting, resolved per family, does not set them apart
    runs = [
        *seeds("t", {"model.scan": "none"}, FAST),
        *seeds("m", {"model.family": "mamba", "model.scan": "native"}, SLOW),
    ]
    (f,) = family_findings(board_of(runs))
    assert (f.first, f.leanest) == ("transformer", "transformer")
    text = "\n".join(f.lines())
    assert "**transformer** reaches the target first" in text
    assert "**transformer** with the least energy" in text
    # the other way round
    runs = [*seeds("t", {}, SLOW), *seeds("m", {"model.family": "mamba"}, FAST)]
    (f,) = family_findings(board_of(runs))
    assert (f.first, f.leanest) == ("mamba", "mamba")


def test_families_whose_intervals_overlap_cannot_be_told_apart():
    runs = [*seeds("t", {}, FAST), *seeds("m", {"model.family": "mamba"}, NEAR)]
    (f,) = family_findings(board_of(runs))
    assert f.first is None and f.leanest is None
    assert "cannot tell which family reaches the target first (the intervals overlap)" in (
        "\n".join(f.lines())
    )


def test_families_are_compared_only_under_otherwise_the_same_settings():
    runs = [
        *seeds("t", {}, FAST),
        *seeds("m", {"model.family": "mamba", "data.seq_len": 256}, SLOW),
        *seeds("d", {"strategy": "ddp", "nproc": 2}, SLOW),  # not single-rank
    ]
    assert family_findings(board_of(runs)) == []


def test_an_estimate_says_its_energy_follows_time():
    runs = [
        *seeds("t", {}, FAST, source="estimate", measured=False),
        *seeds("m", {"model.family": "mamba"}, SLOW, source="estimate", measured=False),
    ]
    (f,) = family_findings(board_of(runs))
    assert "estimate: time × modelled power" in "\n".join(f.lines())


def _dp(strategy: str, seed: int, curve: list[tuple[int, float]]) -> TargetRun:
    # ODC splits the same minibatch by cost: not another setting
    balance = "balanced-cost" if strategy == "odc" else "same-count"
    settings = {"strategy": strategy, "nproc": 2, "seed": seed, "data.balance": balance}
    return TargetRun(f"{strategy}{seed}", settings, [(True, 10.0, 100.0, 0)], curve=curve)


def test_ddp_fsdp_odc_that_train_the_same_model_agree():
    runs = [
        _dp(s, seed, [(step, loss + i * 1e-7) for step, loss in CURVE])
        for i, s in enumerate(("ddp", "fsdp", "odc"))
        for seed in (0, 1)
    ]
    (f,) = curve_findings(seed_rows(as_rows(runs)), curve_rows(runs))
    assert f.strategies == ("ddp", "fsdp", "odc") and f.n_seeds == 2
    assert f.n_points == 2 * len(CURVE)
    assert f.largest == pytest.approx(2e-7) and f.agree
    assert "within rounding" in "\n".join(f.lines())


def test_a_strategy_that_drifts_is_found_where_it_drifts_most():
    drift = [(0, 5.5), (10, 4.8), (20, 4.3), (30, 3.96)]  # 0.2 above at step 20, seed 1
    runs = [_dp("ddp", 0, CURVE), _dp("fsdp", 0, CURVE), _dp("ddp", 1, CURVE),
            _dp("fsdp", 1, drift)]  # fmt: skip
    (f,) = curve_findings(seed_rows(as_rows(runs)), curve_rows(runs))
    assert f.largest == pytest.approx(0.2) and not f.agree
    assert (f.seed, f.step, f.pair) == (1, 20, ("ddp", "fsdp"))
    assert f.relative > SAME_LOSS_RTOL
    assert "do not train the same model" in "\n".join(f.lines())


def test_one_strategy_alone_or_another_setting_is_no_comparison():
    other = TargetRun("fsdp0", {"strategy": "fsdp", "nproc": 2, "seed": 0, "data.seq_len": 256},
                      [(True, 10.0, 100.0, 0)], curve=CURVE)  # fmt: skip
    runs = [_dp("ddp", 0, CURVE), other]
    assert curve_findings(seed_rows(as_rows(runs)), curve_rows(runs)) == []


def test_the_convergence_suite_falls_into_the_groups_its_statements_compare():
    """Each comparison of the `convergence` suite is one group once its settings are resolved
    (a family's own scan, ODC's balancing by cost): none is lost to a setting the resolution
    sets apart."""
    from greenbench.spec import expand_suite
    from greenbench.suite import load_suite

    specs = expand_suite(load_suite("convergence"), {}, label=None, machine_device="cpu")
    rows = [
        {"settings": s.settings, "workload": s.workload, "device_type": "cpu", "energy": "e",
         "strategy": s.settings["strategy"]}
        for s in specs
    ]  # fmt: skip

    def groups(dropped, strategies: tuple[str, ...]) -> list[int]:
        keys = [same_but(r, dropped) for r in rows if r["strategy"] in strategies]
        return sorted(keys.count(k) for k in set(keys))

    assert groups(FAMILY_KEYS.__contains__, ("single",)) == [6]  # 3 families × 2 seeds
    # DDP, FSDP and ODC × 2 seeds in one group; the communication-efficient methods' runs
    # (DDP, PowerSGD r=4, local SGD, DiLoCo, evaluated every 16 steps) each a group of 2 seeds
    assert groups(STRATEGY_KEYS.__contains__, DATA_PARALLEL) == [2, 2, 2, 2, 6]
    assert groups(lambda k: k in (SCHEDULE, SKIP), ("skippipe",)) == [4]  # 2 schedules × 2
