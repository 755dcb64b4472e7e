"""The cost model against step times, communication and energy worked by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from greenbench.models import model_preset
from greenbench.planner import alpha_beta
from greenbench.planner.cost import Batch, link_of, predict
from greenbench.planner.device import device_model
from greenbench.vocabulary import Layout

H100 = device_model("h100", "bf16")
SUSTAINED = 0.4 * 989e12
BUSY_W, IDLE_W = 0.9 * 700, 75.0
ONE_B, SEVEN_B = model_preset("transformer", "1b"), model_preset("transformer", "7b")
HEAD_7B = 6 * (32000 * 4096 + 4096)  # FLOPs per token of the final norm and LM head


def block_7b(seq_len: int) -> float:
    """FLOPs per token of one 7b block (6·N + 12·L·d·S without the head, over 32 blocks)."""
    return (39644061696 + 1572864 * seq_len - HEAD_7B) / 32


def test_one_device_is_compute_at_sustained_flops_and_busy_power() -> None:
    batch = Batch(seq_len=2048, global_batch=16, micro_batch=8)
    p = predict(ONE_B, Layout(), batch, H100)
    flops = (6207074304 + 540672 * 2048) * 16 * 2048
    assert p.microbatches == 2
    assert p.step_s == pytest.approx(flops / SUSTAINED)
    assert p.comm_s == p.bubble_s == 0
    assert p.tokens_per_s == pytest.approx(16 * 2048 / p.step_s)
    assert p.joules_per_token == pytest.approx(BUSY_W * p.step_s / (16 * 2048))


def test_tensor_parallel_adds_four_all_reduces_per_block_and_microbatch() -> None:
    batch = Batch(seq_len=4096, global_batch=4, micro_batch=1)
    p = predict(SEVEN_B, Layout(tp=2), batch, H100)
    n = 4096 * 4096 * 2  # one microbatch's activations in bf16
    one = 2 * 1 * 5e-6 + 2 * (1 / 2) * n / 450e9  # all-reduce over 2 ranks on NVLink
    tp_s = 4 * 32 * 4 * one  # 4 microbatches × 32 blocks × 4 all-reduces
    # tp splits the blocks; every tp rank computes the whole LM head
    compute = (32 * block_7b(4096) / 2 + HEAD_7B) * 4 * 4096 / SUSTAINED
    assert p.comm_s == pytest.approx(tp_s)
    assert p.step_s == pytest.approx(compute + tp_s)
    energy = 2 * (BUSY_W * compute + IDLE_W * tp_s)
    assert p.joules_per_token == pytest.approx(energy / (4 * 4096))


def test_pipeline_bubble_and_point_to_point() -> None:
    batch = Batch(seq_len=4096, global_batch=8, micro_batch=1)
    p = predict(SEVEN_B, Layout(pp=4), batch, H100)
    # four stages of 8 blocks: the last, with the LM head, sets the pace
    compute = (8 * block_7b(4096) + HEAD_7B) * 8 * 4096 / SUSTAINED
    assert p.microbatches == 8
    # bubble: (p−1)/(m+p−1) of the pipeline time = compute × (p−1)/m
    assert p.bubble_s == pytest.approx(compute * 3 / 8)
    assert p.bubble_s / (compute + p.bubble_s) == pytest.approx(alpha_beta.bubble_fraction(4, 8))
    p2p = 5e-6 + 4096 * 4096 * 2 / 450e9
    assert p.comm_s == pytest.approx(2 * 8 * p2p)


def test_data_parallel_communication_hides_under_compute_up_to_its_length() -> None:
    batch = Batch(seq_len=128, global_batch=2, micro_batch=1)
    p = predict(SEVEN_B, Layout(dp_replicate=2), batch, H100)
    compute = (39644061696 + 1572864 * 128) * 2 * 128 / 2 / SUSTAINED
    all_reduce = 2 * 5e-6 + 6738415616 * 4 / 450e9  # fp32 gradients over 2 ranks
    assert p.compute_s == pytest.approx(compute)
    assert p.comm_s == pytest.approx(all_reduce - compute)
    long = predict(SEVEN_B, Layout(dp_replicate=2), Batch(4096, 64, 1), H100)
    assert long.comm_s == 0.0  # the all-reduce fits under a long step's compute


def test_uneven_stages_run_at_the_busiest_ones_pace() -> None:
    batch = Batch(seq_len=1024, global_batch=6, micro_batch=1)
    p = predict(SEVEN_B, Layout(pp=3), batch, H100)  # stages of 11, 11 and 10 blocks
    busiest = max(11 * block_7b(1024), 10 * block_7b(1024) + HEAD_7B)
    assert p.compute_s == pytest.approx(busiest * 6 * 1024 / SUSTAINED)


def test_fsdp_pays_one_latency_per_unit_and_blocks_where_the_device_does_not_overlap() -> None:
    batch = Batch(seq_len=128, global_batch=2, micro_batch=1)
    layout = Layout(dp_shard=2)
    p = predict(SEVEN_B, layout, batch, H100)
    units = 32 + 1  # every block, and the root
    gather = units * 5e-6 + 6738415616 * 2 / 2 / 450e9  # bf16 parameters, half received
    scatter = units * 5e-6 + 6738415616 * 4 / 2 / 450e9  # fp32 gradients
    fsdp = 2 * gather + scatter  # one microbatch per rank
    assert p.comm_s == pytest.approx(max(0.0, fsdp - p.compute_s))
    blocking = replace(H100, overlapped=frozenset({"dp_replicate"}))
    b = predict(SEVEN_B, layout, batch, blocking)
    assert b.comm_s == pytest.approx(fsdp)
    assert b.step_s == pytest.approx(b.compute_s + fsdp)


@pytest.mark.parametrize(
    ("layout", "dim", "fast"),
    [
        (Layout(dp_shard=16, tp=8), "tp", True),
        (Layout(dp_shard=16, tp=8), "dp_shard", False),
        (Layout(dp_shard=2, tp=4), "dp_shard", True),
        (Layout(tp=16), "tp", False),
        (Layout(pp=2, cp=4), "pp", True),
        (Layout(pp=4, cp=4), "pp", False),
    ],
)
def test_groups_inside_a_node_use_nvlink(layout: Layout, dim: str, fast: bool) -> None:
    assert (link_of(layout, dim, H100) == H100.fast) is fast


def test_a_batch_that_does_not_divide_has_no_prediction() -> None:
    assert predict(SEVEN_B, Layout(dp_replicate=4), Batch(4096, 6, 1), H100) is None
    assert predict(SEVEN_B, Layout(dp_replicate=2), Batch(4096, 6, 2), H100) is None


def test_a_power_limit_slows_compute_and_caps_power() -> None:
    batch = Batch(seq_len=2048, global_batch=16, micro_batch=8)
    limited = device_model("h100", "bf16", power_limit_w=400)
    free, capped = predict(ONE_B, Layout(), batch, H100), predict(ONE_B, Layout(), batch, limited)
    slowdown = (630 / 400) ** (1 / 3)
    assert capped.step_s == pytest.approx(free.step_s * slowdown)
    assert capped.joules_per_token == pytest.approx(400 * capped.step_s / (16 * 2048))
    assert capped.joules_per_token < free.joules_per_token  # the trade a power limit makes


def test_memory_decides_fit() -> None:
    batch = Batch(seq_len=4096, global_batch=8, micro_batch=1)
    assert not predict(SEVEN_B, Layout(), batch, H100).fits  # 108 GB of state alone
    assert predict(SEVEN_B, Layout(dp_shard=8), batch, H100).fits
