"""greenbench.aggregate: MFU, per-repeat aggregation over ranks, summaries, against
hand-computed numbers."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from greenbench.aggregate import aggregate_repeat, checked_mfu, exceeds_peak, mfu, summarise
from greenbench.energy.base import EnergyWindow
from greenbench.results import RankResult


def window(source: str = "estimate", energy_j: float | None = 100.0, **kw) -> EnergyWindow:
    return EnergyWindow(
        source=source, measured=source != "estimate", seconds=2.0, energy_j=energy_j, **kw
    )


def rank(r: int, **kw) -> RankResult:
    base = {
        "rank": r,
        "local_rank": r,
        "host": "h",
        "repeat": 0,
        "tokens": 1000,
        "seconds": 2.0,
        "compute_s": 1.5,
        "comm_s": 0.3,
        "wait_s": 0.2,
        "step_times_s": (0.5, 0.6, 0.4, 0.5),
        "peak_mem_bytes": 100,
        "flops": 3e9,
        "loss": 2.0,
        "n_microbatches": 2,
        "energy": None,
    }
    return RankResult(**(base | kw))


def two_ranks() -> list[RankResult]:
    return [
        rank(0, energy=window(energy_j=100.0, energy_cpu_j=80.0)),
        rank(
            1,
            tokens=3000,
            seconds=2.5,
            wait_s=0.5,
            step_times_s=(0.7, 0.5, 0.6, 0.7),
            peak_mem_bytes=300,
            flops=9e9,
            loss=3.0,
            energy=window(energy_j=50.0, energy_gpu_j=50.0),
        ),
    ]


def aggregate(ranks: list[RankResult], **kw):
    args = {"idle_power_w": 10.0, "peak_flops": 1e10, "n_devices": 2, "carbon_g_per_kwh": 400.0}
    return aggregate_repeat(ranks, **(args | kw))


def test_mfu() -> None:
    assert mfu(6e10, 3.0, 1e10, 4) == pytest.approx(0.5)  # 6e10 / (3 s × 1e10 × 4)
    assert mfu(6e10, 3.0, None, 4) is None
    with pytest.raises(ValueError):
        mfu(1.0, 0.0, 1e10, 1)
    with pytest.raises(ValueError):
        mfu(1.0, 1.0, 1e10, 0)


def test_mfu_above_one_is_unknown_with_its_reason_never_clamped() -> None:
    # the two ranks do 1.2e10 FLOPs in 2.5 s on 2 devices: 2.4e9 FLOP/s per device
    r = aggregate(two_ranks(), peak_flops=2e9)  # a peak measured too low: 120 %
    assert r.mfu is None  # unknown: neither 1.2 nor 1.0
    assert r.mfu_note.startswith("MFU unknown") and "120%" in r.mfu_note
    assert "2.4e+09" in r.mfu_note and "2e+09" in r.mfu_note  # achieved, and the peak beaten
    assert r.tokens_per_s == pytest.approx(1600.0)  # the rest of the row is kept
    exact = aggregate(two_ranks(), peak_flops=2.4e9)  # exactly at the peak is possible
    assert exact.mfu == pytest.approx(1.0) and exact.mfu_note == ""
    assert aggregate(two_ranks()).mfu_note == ""  # 24 %: nothing to say
    assert exceeds_peak(1.2e10, 2.5, 2e9, 2) and not exceeds_peak(1.2e10, 2.5, 2.4e9, 2)
    assert not exceeds_peak(1.2e10, 2.5, None, 2)
    assert checked_mfu(6e10, 3.0, 1e10, 4) == (pytest.approx(0.5), "")
    assert checked_mfu(6e10, 3.0, 1e9, 4)[0] is None


def test_aggregate_two_ranks_by_hand() -> None:
    r = aggregate(two_ranks())
    assert r.repeat == 0
    assert r.tokens == 4000
    assert r.seconds == 2.5  # the slowest rank
    assert r.tokens_per_s == pytest.approx(1600.0)
    assert (r.energy_source, r.energy_measured) == ("estimate", False)
    assert r.energy_j == pytest.approx(150.0)
    assert (r.energy_cpu_j, r.energy_gpu_j, r.energy_dram_j) == (80.0, 50.0, None)
    assert r.energy_net_j == pytest.approx(125.0)  # 150 − 10 W × 2.5 s
    assert r.joules_per_token == pytest.approx(0.0375)
    assert r.net_joules_per_token == pytest.approx(0.03125)
    assert r.flops == pytest.approx(1.2e10)
    assert r.mfu == pytest.approx(0.24)  # 1.2e10 / (2.5 s × 1e10 × 2)
    assert r.peak_mem_bytes == 300
    assert r.step_times_s == (0.7, 0.6, 0.6, 0.7)  # element-wise max over ranks
    assert r.step_time_p50_s == pytest.approx(0.65)
    assert r.step_time_p95_s == pytest.approx(0.7)
    assert r.wait_fraction == pytest.approx(0.7 / 4.5)
    assert r.wait_energy_j == pytest.approx(150.0 * 0.7 / 4.5)
    assert r.co2_g == pytest.approx(150.0 / 3.6e6 * 400.0)
    assert r.loss == pytest.approx((2.0 * 1000 + 3.0 * 3000) / 4000)
    assert r.energy_note == ""


def test_failed_meter_gives_no_energy_not_zero() -> None:
    ranks = two_ranks()
    ranks[1] = replace(ranks[1], energy=window(energy_j=None, note="read error: EIO"))
    r = aggregate(ranks)
    assert r.energy_j is None and r.energy_net_j is None
    assert r.joules_per_token is None and r.net_joules_per_token is None
    assert r.wait_energy_j is None and r.co2_g is None
    assert (r.energy_cpu_j, r.energy_gpu_j) == (None, None)
    assert "rank(s) [1]" in r.energy_note and "read error: EIO" in r.energy_note
    assert r.energy_source == "estimate"
    assert r.tokens_per_s == pytest.approx(1600.0)  # the rest is still reported


def test_mixed_sources_are_named_and_an_estimate_taints_measured() -> None:
    ranks = two_ranks()
    r = aggregate(
        [replace(ranks[0], energy=window("rapl")), replace(ranks[1], energy=window("nvml"))]
    )
    assert (r.energy_source, r.energy_measured) == ("nvml+rapl", True)
    assert "different energy sources" in r.energy_note
    r = aggregate([replace(ranks[0], energy=window("rapl")), ranks[1]])
    assert (r.energy_source, r.energy_measured) == ("estimate+rapl", False)
    assert "part of the energy is an estimate" in r.energy_note


def test_no_meter_at_all() -> None:
    r = aggregate([rank(0), rank(1)])
    assert (r.energy_source, r.energy_measured, r.energy_j) == ("none", False, None)
    assert "no rank read an energy meter" in r.energy_note


def test_only_owning_rank_carries_energy() -> None:
    r = aggregate([rank(0, energy=window(energy_j=90.0)), rank(1)])
    assert r.energy_j == 90.0 and r.joules_per_token == pytest.approx(90.0 / 2000)


def test_optional_inputs_unknown() -> None:
    r = aggregate(two_ranks(), idle_power_w=None, peak_flops=None, carbon_g_per_kwh=None)
    assert r.energy_j == pytest.approx(150.0)
    assert (r.energy_net_j, r.net_joules_per_token, r.mfu, r.co2_g) == (None, None, None, None)


def test_an_idle_power_above_the_windows_mean_leaves_net_energy_unknown_never_negative() -> None:
    # 20 W idle against a 5 W window (10 J in 2 s): the idle sample was taken on a busier machine
    r = aggregate([rank(0, energy=window(energy_j=10.0))], idle_power_w=20.0, n_devices=1)
    assert r.energy_net_j is None and r.net_joules_per_token is None
    assert r.idle_power_w == 20.0  # what was sampled stays, to see why
    assert r.idle_note.startswith("idle baseline unreliable")
    assert "above the window's mean power 5 W" in r.idle_note
    assert r.energy_j == pytest.approx(10.0)  # the gross figure is as good as ever


def test_an_idle_sample_taken_under_load_leaves_net_energy_unknown() -> None:
    why = "idle power sampled while other processes kept 1.20 cores busy"
    r = aggregate(two_ranks(), idle_sample_note=why)
    assert r.energy_net_j is None and r.net_joules_per_token is None
    assert r.idle_note == f"idle baseline unreliable: {why}"
    clean = aggregate(two_ranks())
    assert clean.energy_net_j == pytest.approx(150.0 - 10.0 * 2.5) and clean.idle_note == ""


def test_unequal_step_counts_pool_steps() -> None:
    r = aggregate([rank(0, step_times_s=(1.0, 2.0)), rank(1, step_times_s=(3.0,))])
    assert r.step_times_s == (1.0, 2.0, 3.0)
    assert r.step_time_p50_s == 2.0
    assert "pool" in r.energy_note


def test_unknown_waiting_reaches_the_note_once() -> None:
    why = "waiting inside collectives unknown: ranks issued different collectives (2/3 calls)"
    r = aggregate([rank(0, comm_note=why), rank(1, comm_note=why)])
    assert r.energy_note.count(why) == 1
    assert aggregate(two_ranks()).energy_note == ""


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="at least one"):
        aggregate([])
    with pytest.raises(ValueError, match="different repeats"):
        aggregate([rank(0), rank(1, repeat=1)])


def test_summarise() -> None:
    s = summarise([3.0, 1.0, 2.0, None, math.nan])
    assert (s["n"], s["n_missing"], s["median"]) == (3, 2, 2.0)
    assert (s["ci_low"], s["ci_high"], s["min"], s["max"]) == (1.0, 3.0, 1.0, 3.0)
    # n = 9: coverage of [x(2), x(8)] is 1 − 2·P(Bin(9, ½) ≤ 1) = 1 − 20/512 ≈ 0.961 ≥ 0.95,
    # of [x(3), x(7)] 1 − 2·46/512 ≈ 0.820 < 0.95
    s = summarise(range(9, 0, -1))
    assert (s["median"], s["ci_low"], s["ci_high"]) == (5.0, 2.0, 8.0)
    empty = summarise([None])
    assert empty["n"] == 0 and empty["median"] is None and empty["n_missing"] == 1


# ------------------------------------------------------ what is read beside the run's devices


def gpu_window(energy_j: float, samples: tuple[float, ...] = ()) -> EnergyWindow:
    from greenbench.energy.base import PowerSample

    points = tuple(PowerSample(0.1 * i, w, "gpu0") for i, w in enumerate(samples))
    return EnergyWindow("nvml", True, 2.0, energy_j, energy_gpu_j=energy_j, samples=points)


def test_gpu_power_is_the_mean_per_device_and_the_highest_sample():
    ranks = [
        rank(0, energy=gpu_window(1000.0, (480.0, 495.0))),
        rank(1, energy=gpu_window(900.0, (470.0, 501.5))),
    ]
    r = aggregate(ranks)
    assert r.gpu_power_avg_w == pytest.approx(1900.0 / 2.0 / 2)
    assert r.gpu_power_peak_w == 501.5
    cpu = aggregate([rank(0, energy=window(energy_cpu_j=100.0))], n_devices=1)
    assert cpu.gpu_power_avg_w is None and cpu.gpu_power_peak_w is None


def test_the_node_meter_is_stored_beside_the_devices_energy_never_in_it():
    node = EnergyWindow("ipmi", True, 2.0, 1400.0, note="3 reading(s)")
    rapl = EnergyWindow("rapl", True, 2.0, 150.0, energy_cpu_j=120.0, energy_dram_j=30.0)
    r = aggregate([rank(0, energy=gpu_window(1000.0), extra_energy=(rapl, node))], n_devices=1)
    assert r.energy_j == 1000.0 and r.energy_gpu_j == 1000.0  # the run's own devices only
    assert (r.energy_node_j, r.energy_node_source) == (1400.0, "ipmi")
    assert (r.energy_cpu_j, r.energy_dram_j, r.energy_host_source) == (120.0, 30.0, "rapl")
    plain = aggregate([rank(0, energy=gpu_window(1000.0))], n_devices=1)
    assert plain.energy_node_source is None and plain.energy_node_j is None
    assert plain.energy_host_source is None and plain.energy_cpu_j is None


def test_a_node_meter_that_did_not_answer_is_unavailable_never_zero():
    silent = EnergyWindow("redfish", True, 2.0, None, note="unavailable: Redfish … unreachable")
    r = aggregate([rank(0, energy=gpu_window(1000.0), extra_energy=(silent,))], n_devices=1)
    assert r.energy_node_j is None and r.energy_node_source == "redfish"
    assert r.energy_node_note.startswith("unavailable") and "unreachable" in r.energy_node_note
    assert r.energy_j == 1000.0


def test_beside_windows_survive_the_trip_from_rank_to_launcher():
    node = EnergyWindow("ipmi", True, 2.0, 1400.0)
    r = rank(0, energy=gpu_window(10.0), extra_energy=(node,))
    assert RankResult.from_dict(r.to_dict()) == r
    old = r.to_dict()
    del old["extra_energy"]  # a result written before these existed
    assert RankResult.from_dict(old).extra_energy == ()


def test_useful_tokens_count_the_share_of_the_work_each_rank_ran() -> None:
    """A rank whose steps ran half the blocks per token: its tokens count half as useful; a rank
    that says nothing ran every block; J per useful token is energy over useful tokens."""
    ranks = two_ranks()
    ranks[0] = replace(ranks[0], useful_tokens=500.0)  # 1000 tokens at share 0.5
    out = aggregate(ranks)
    assert out.useful_tokens == 500.0 + 3000.0
    assert out.visited_share == pytest.approx(3500.0 / 4000.0)
    assert out.useful_tokens_per_s == pytest.approx(3500.0 / 2.5)
    assert out.joules_per_useful_token == pytest.approx(150.0 / 3500.0)
    assert out.useful_flops == out.flops == pytest.approx(12e9)
    full = aggregate(two_ranks())
    assert full.visited_share == 1.0 and full.useful_tokens == full.tokens
    assert full.joules_per_useful_token == pytest.approx(full.joules_per_token)
    no_energy = aggregate([replace(r, energy=None) for r in ranks])
    assert no_energy.joules_per_useful_token is None and no_energy.useful_tokens == 3500.0


def test_mfu_under_both_flop_conventions() -> None:
    # 1.2e10 PaLM FLOPs and 0.8e10 causal in 2.5 s on 2 devices of 1e10 FLOP/s each
    ranks = [replace(r, flops_causal=c) for r, c in zip(two_ranks(), (2e9, 6e9), strict=True)]
    r = aggregate(ranks)
    assert (r.flops, r.flops_causal) == (1.2e10, 8e9)
    assert r.mfu == pytest.approx(0.24) and r.mfu_causal == pytest.approx(0.16)
    # a rank that did not count its causal FLOPs: the repeat's are unknown, never a partial sum
    unknown = aggregate([ranks[0], replace(ranks[1], flops_causal=None)])
    assert unknown.flops_causal is None and unknown.mfu_causal is None
    assert unknown.mfu == pytest.approx(0.24)
    # no peak: no MFU under either
    assert aggregate(ranks, peak_flops=None).mfu_causal is None
