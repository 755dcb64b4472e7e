"""The model registry: names, errors, seeding, and analytic ModelInfo against built models."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from greenbench.errors import SpecError
from greenbench.models import FAMILIES, ModelInfo, build_model, model_info

ALL_PRESETS = [(family, size) for family in FAMILIES for size in FAMILIES[family].presets]


def test_registry_has_both_families_with_the_same_sizes():
    assert set(FAMILIES) >= {"transformer", "mamba"}
    assert list(FAMILIES["transformer"].presets) == list(FAMILIES["mamba"].presets)
    assert {"tiny", "125m", "350m", "1b", "7b"} <= set(FAMILIES["mamba"].presets)


def test_unknown_family_names_the_choices():
    with pytest.raises(SpecError, match=r"unknown model family 'rwkv'.*mamba, mamba2, transformer"):
        build_model("rwkv", "tiny", seed=0)
    with pytest.raises(SpecError, match="mamba, mamba2, transformer"):
        model_info("rwkv", "tiny")


def test_unknown_size_names_the_choices():
    with pytest.raises(SpecError, match=r"unknown size '3b'.*tiny, 125m, 350m, 1b, 7b"):
        model_info("mamba", "3b")
    with pytest.raises(SpecError, match="tiny, 125m"):
        build_model("transformer", "3b", seed=0)


def test_bad_vocab_size_is_a_spec_error():
    with pytest.raises(SpecError, match="vocab_size"):
        model_info("transformer", "tiny", vocab_size=1)


@pytest.mark.parametrize(("family", "size"), ALL_PRESETS)
def test_model_info_counts_match_the_built_model(family, size):
    model = build_model(family, size, seed=0, device="meta")  # shapes only, no memory
    info = model_info(family, size)
    params = dict(model.named_parameters())
    assert info.n_params == sum(p.numel() for p in params.values())
    embedding = model.get_input_embeddings().weight
    assert info.n_params_embedding == embedding.numel()
    assert info.n_params_non_embedding == info.n_params - embedding.numel()
    assert model.get_output_embeddings().weight is not embedding  # untied: the head is counted
    assert info.vocab_size == embedding.shape[0]
    assert info.d_model == embedding.shape[1]
    assert info.n_layers == model.config.num_hidden_layers


def test_vocab_size_override_reaches_model_and_info():
    model = build_model("mamba", "tiny", vocab_size=300, seed=0)
    info = model_info("mamba", "tiny", vocab_size=300)
    assert model.get_input_embeddings().weight.shape[0] == 300 == info.vocab_size
    assert info.n_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_same_seed_same_weights_other_seed_other_weights(family):
    a, b, c = (build_model(family, "tiny", seed=s) for s in (7, 7, 8))
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name
    pairs = zip(a.parameters(), c.parameters(), strict=True)
    assert any(not torch.equal(pa, pc) for pa, pc in pairs)


def test_transformer_uses_sdpa_and_mamba_ignores_position_ids():
    transformer = build_model("transformer", "tiny", seed=0)
    assert transformer.config._attn_implementation == "sdpa"
    ids = torch.randint(0, 1024, (2, 12))
    restart = torch.cat([torch.arange(6), torch.arange(6)]).repeat(2, 1)
    assert transformer(input_ids=ids, position_ids=restart).logits.shape == (2, 12, 1024)


def test_model_info_is_frozen():
    info = model_info("transformer", "tiny")
    assert isinstance(info, ModelInfo)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.n_layers = 3  # type: ignore[misc]
    assert info.to_dict()["family"] == "transformer"
