"""The memory model, against bytes worked by hand for the 7b preset (and the Mamba block for the
tiny one), and the preflight's lower bound read from the same functions."""

from __future__ import annotations

import math

import pytest

from greenbench.models import model_preset
from greenbench.planner import memory
from greenbench.planner.estimate import Need
from greenbench.vocabulary import Layout

SEVEN_B = model_preset("transformer", "7b")
N, EMB, L, D, V, FFN = 6738415616, 131072000, 32, 4096, 32000, 11008
PER_LAYER = (N - EMB - V * D - D) / L  # 202,383,360: attention 4·d² + MLP 3·d·ffn + 2 norms
HEAD = V * D + D
NORMS = 2 * D  # a block's two RMSNorm weights: whole on every tp rank
#: elements per token a Llama block saves: norms (3·d + 1, twice) whole; q, k, v, attention
#: output, log-sum-exp per head and the MLP's four ffn-wide tensors split by tp
WHOLE, SPLIT = 2 * (3 * D + 1), 2 * D + 2 * D + 32 + 4 * FFN
FINAL = 3 * D + 1  # the final RMSNorm, on the last stage


def test_block_parameters_match_the_llama_block() -> None:
    assert PER_LAYER == 4 * D * D + 3 * D * FFN + 2 * D
    assert SEVEN_B.params_per_layer() == PER_LAYER


def test_block_activations_per_token() -> None:
    # 8·d + 2·d_kv + 4·d_ffn + heads + 2 with d_kv = d (32 KV heads of 128)
    assert memory.block_activation_elements(SEVEN_B) == 8 * D + 2 * D + 4 * FFN + 32 + 2
    assert memory.block_activation_elements(SEVEN_B, tp=4) == WHOLE + SPLIT / 4
    assert memory.block_activation_constant(SEVEN_B) == 0


def test_mamba_block_activations_per_token() -> None:
    tiny = model_preset("mamba", "tiny")  # d 256, d_inner 512, d_state 16, dt_rank 16
    whole = 3 * 256 + 1 + 16 + 2 * 16 + 2 * 16  # norm, x_proj's output, B and C
    split = 9 * 512 + 16 * 512 / 32  # inner-width tensors, the scan's states every 32 steps
    assert memory.block_activation_elements(tiny) == whole + split
    assert memory.block_activation_elements(tiny, tp=2) == whole + split / 2
    assert memory.block_activation_constant(tiny, tp=2) == 2 * 512 * 16 / 2
    assert memory.block_params_on_rank(tiny, 2) == (tiny.params_per_layer() - 256) / 2 + 256


def test_one_device_holds_everything() -> None:
    m = memory.per_device(
        SEVEN_B, Layout(), micro_batch=1, seq_len=4096, activation_bytes=2, microbatches=4
    )
    assert m.state_b == pytest.approx(16 * N)
    assert m.buffers_b == 0
    assert m.activations_b == pytest.approx(4096 * ((WHOLE + SPLIT) * L + FINAL) * 2)
    assert m.logits_b == 4096 * V * 4
    assert m.total_b == m.state_b + m.activations_b + m.logits_b == m.model_state_b


def test_each_degree_divides_what_it_splits() -> None:
    layout = Layout(dp_replicate=2, dp_shard=4, tp=2, cp=2)
    m = memory.per_device(
        SEVEN_B, layout, micro_batch=2, seq_len=4096, activation_bytes=2, microbatches=4
    )
    # FSDP shards everything over dp_shard × cp, tp the block matrices only; not dpr
    block = (PER_LAYER - NORMS) / 2 + NORMS
    assert m.state_b == pytest.approx(16 * (L * block + EMB + HEAD) / (4 * 2))
    assert m.buffers_b == pytest.approx(2 * block * 2)  # two blocks in bf16, their tp slice
    tokens = 2 * 4096 / 2  # micro-batch × seq over cp
    ring = D  # cp > 1: the ring attention's output copied back for o_proj, split by tp
    assert m.activations_b == pytest.approx(tokens * ((WHOLE + (SPLIT + ring) / 2) * L + FINAL) * 2)
    assert m.logits_b == tokens * V * 4
    assert m.model_state_b == m.total_b - m.buffers_b


def test_context_parallel_ranks_shard_the_state_with_fsdp() -> None:
    m = memory.per_device(
        SEVEN_B, Layout(cp=2), micro_batch=1, seq_len=4096, activation_bytes=2, microbatches=1
    )
    assert m.state_b == pytest.approx(16 * N / 2)
    assert m.buffers_b == pytest.approx(2 * PER_LAYER * 2)  # FSDP gathers over the cp ranks
    assert memory.fsdp_shards(Layout(dp_shard=4, cp=2, tp=2)) == 8


def test_a_pipeline_counts_the_busier_of_its_end_stages() -> None:
    layout = Layout(pp=4)
    m = memory.per_device(
        SEVEN_B, layout, micro_batch=1, seq_len=4096, activation_bytes=2, microbatches=8
    )
    blocks = 8 * PER_LAYER
    per_block = 4096 * (WHOLE + SPLIT) * 2
    first = 16 * (blocks + EMB) + per_block * 8 * 4  # 4 microbatches in flight (min(m, pp))
    last = 16 * (blocks + HEAD) + per_block * 8 + 4096 * (FINAL * 2 + V * 4)
    assert m.total_b == pytest.approx(max(first, last))
    assert m.total_b == pytest.approx(first)


def test_uneven_stages_count_the_largest() -> None:
    m = memory.per_device(
        SEVEN_B, Layout(pp=3), micro_batch=1, seq_len=1024, activation_bytes=2, microbatches=1
    )
    assert m.state_b >= 16 * (math.ceil(32 / 3) * PER_LAYER)


def test_the_preflight_lower_bound_reads_the_same_model() -> None:
    need = Need(
        n_params=N, n_layers=L, d_model=D, vocab_size=V, flops_per_token=1.0, world=8,
        ranks_per_node=8, shards=8, micro_batch=2, seq_len=4096, tokens_per_step=1.0,
        activation_bytes=2, warmup_steps=1, repeats=1, steps=1, max_steps=1, min_window_s=0.0,
    )  # fmt: skip
    assert need.state_bytes_per_rank() == memory.state_bytes(N, 8) == N * 16 / 8
    tokens = 2 * 4096
    assert need.activation_bytes_per_rank() == tokens * V * 4 + tokens * D * 2 * L
    full = memory.per_device(
        SEVEN_B, Layout(dp_shard=8), micro_batch=2, seq_len=4096, activation_bytes=2,
        microbatches=1,
    )  # fmt: skip
    lower = need.state_bytes_per_rank() + need.activation_bytes_per_rank()
    assert lower < full.total_b  # the lower bound is never above the prediction


@pytest.mark.parametrize(("pp", "cp"), [(4, 1), (1, 4), (2, 2)])
def test_the_preflight_lower_bound_splits_layers_over_pp_and_tokens_over_cp(pp: int, cp: int):
    need = Need(
        n_params=N, n_layers=L, d_model=D, vocab_size=V, flops_per_token=1.0, world=8,
        ranks_per_node=8, shards=8, micro_batch=2, seq_len=4096, tokens_per_step=1.0,
        activation_bytes=2, warmup_steps=1, repeats=1, steps=1, max_steps=1, min_window_s=0.0,
        pp=pp, cp=cp,
    )  # fmt: skip
    tokens = 2 * 4096 / cp
    logits = tokens * V * 4 if pp == 1 else 0  # a pipeline's logits live on its last stage
    assert need.activation_bytes_per_rank() == logits + tokens * D * 2 * (L // pp)
    full = memory.per_device(
        SEVEN_B, Layout(dp_shard=8 // (pp * cp), pp=pp, cp=cp), micro_batch=2, seq_len=4096,
        activation_bytes=2, microbatches=max(pp, 1),
    )  # fmt: skip
    assert need.state_bytes_per_rank() + need.activation_bytes_per_rank() < full.total_b
