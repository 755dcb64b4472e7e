"""Mamba presets match the Transformer presets of the same name in parameter count."""

from __future__ import annotations

import pytest

from greenbench.models import FAMILIES, model_info


@pytest.mark.parametrize("size", list(FAMILIES["transformer"].presets))
def test_families_match_in_size_within_ten_percent(size):
    transformer = model_info("transformer", size)
    mamba = model_info("mamba", size)
    print(
        f"{size}: transformer {transformer.n_params:,} params "
        f"({transformer.n_params_non_embedding:,} non-embedding), "
        f"mamba {mamba.n_params:,} ({mamba.n_params_non_embedding:,})"
    )
    assert transformer.vocab_size == mamba.vocab_size
    assert transformer.d_model == mamba.d_model
    assert abs(mamba.n_params / transformer.n_params - 1) < 0.10
    assert abs(mamba.n_params_non_embedding / transformer.n_params_non_embedding - 1) < 0.10


def test_known_shapes():
    llama2_7b = model_info("transformer", "7b")
    assert llama2_7b.n_params == 6_738_415_616  # Llama-2-7B's published count
    tinyllama = model_info("transformer", "1b")
    assert tinyllama.n_params == 1_100_048_384  # TinyLlama-1.1B
    tiny = model_info("transformer", "tiny")
    assert 1_000_000 < tiny.n_params < 10_000_000
    assert model_info("mamba", "tiny").d_inner == 512
