"""Analytic FLOPs per token: hand-computed values, dispatch, and the FlopCounterMode cross-check."""

from __future__ import annotations

import pytest
import torch

from greenbench.errors import SpecError
from greenbench.models import ModelInfo, build_model, model_info
from greenbench.models.flops import (
    flops_per_token,
    mamba_scan_flops_per_token,
    measured_flops_per_token,
)


def small(family: str, **shape) -> ModelInfo:
    return ModelInfo(
        family=family,
        size="hand",
        n_params=1320,
        n_params_embedding=320,
        n_params_non_embedding=1000,
        n_layers=2,
        d_model=8,
        vocab_size=40,
        **shape,
    )


def test_transformer_formula_by_hand():
    info = small("transformer", n_heads=2, n_kv_heads=2, d_ffn=16)
    # 6·1000 + 12·2 layers·8 d·16 S = 6000 + 3072
    assert flops_per_token(info, 16) == 9072
    # the attention term grows linearly with S: +12·2·8 per extra position
    assert flops_per_token(info, 17) - flops_per_token(info, 16) == 192


def test_mamba_formula_by_hand():
    info = small("mamba", d_inner=16, d_state=4, d_conv=4, dt_rank=1)
    # scan: 3 (fwd+bwd) · 2 layers · (9·16·4 + 2·16) = 6 · 608 = 3648
    assert mamba_scan_flops_per_token(info) == 3648
    assert flops_per_token(info, 16) == 6000 + 3648
    assert flops_per_token(info, 4096) == flops_per_token(info, 16)  # no S term


def test_tiny_presets_by_hand():
    # transformer tiny: 6·3,672,320 + 12·4·256·1024
    assert flops_per_token(model_info("transformer", "tiny"), 1024) == 22_033_920 + 12_582_912
    # mamba tiny: 6·3,766,528 + 3·8·(9·512·16 + 2·512)
    assert flops_per_token(model_info("mamba", "tiny"), 1024) == 22_599_168 + 1_794_048


def test_errors():
    with pytest.raises(SpecError, match="seq_len"):
        flops_per_token(model_info("transformer", "tiny"), 0)
    with pytest.raises(SpecError, match="no FLOP formula for model family 'rwkv'"):
        flops_per_token(small("rwkv"), 16)
    with pytest.raises(SpecError, match="selective-scan"):
        mamba_scan_flops_per_token(small("mamba"))


def test_flop_counter_agrees_with_the_matmul_part_for_the_transformer():
    # FlopCounterMode sees the linear layers (forward and backward) but not CPU attention, so it
    # must agree with 6·N_non_embedding; N also holds the RMSNorm weights (0.06% at tiny).
    info = model_info("transformer", "tiny")
    model = build_model("transformer", "tiny", seed=0)
    ids = torch.randint(0, info.vocab_size, (2, 32))
    measured = measured_flops_per_token(model, {"input_ids": ids, "labels": ids})
    six_n = flops_per_token(info, 32) - 12 * info.n_layers * info.d_model * 32
    assert six_n == 6 * info.n_params_non_embedding
    assert measured == pytest.approx(six_n, rel=0.005)
    assert all(p.grad is None for p in model.parameters())  # the helper leaves .grad alone
