"""The fast Mamba mixer computes what transformers' MambaMixer computes: outputs and gradients."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.models.mamba.modeling_mamba import MambaMixer

from greenbench.models import build_model
from greenbench.models.mamba import FastScanMambaMixer, causal_depthwise_conv1d


def reference_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights with transformers' own mixer class (its pure-PyTorch path on CPU)."""
    ref = copy.deepcopy(model)
    for module in ref.modules():
        if type(module) is FastScanMambaMixer:
            module.__class__ = MambaMixer
    return ref


def test_built_model_uses_the_fast_mixer_without_patching_transformers():
    model = build_model("mamba", "tiny", seed=0)
    mixers = [m for m in model.modules() if isinstance(m, MambaMixer)]
    assert len(mixers) == model.config.num_hidden_layers
    assert all(type(m) is FastScanMambaMixer for m in mixers)
    assert MambaMixer.forward is not FastScanMambaMixer.forward  # the library class is untouched


@pytest.mark.parametrize("masked", [False, True])
def test_forward_and_gradients_match_transformers(masked):
    torch.manual_seed(0)
    model = build_model("mamba", "tiny", seed=0)
    ref = reference_copy(model)
    ids = torch.randint(0, model.config.vocab_size, (2, 40))
    labels = ids.clone()
    labels[1, 30:] = -100  # padding
    kwargs = {"input_ids": ids, "labels": labels}
    if masked:
        mask = torch.ones_like(ids)
        mask[1, 30:] = 0
        kwargs["attention_mask"] = mask
    ours, theirs = model(**kwargs), ref(**kwargs)
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-4, atol=1e-4)
    ours.loss.backward()
    theirs.loss.backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        scale = q.grad.abs().max().item()
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4 * scale, msg=name)


def test_generation_cache_path_defers_to_transformers():
    model = build_model("mamba", "tiny", seed=0).eval()
    ref = reference_copy(model)
    ids = torch.randint(0, model.config.vocab_size, (1, 8))
    with torch.no_grad():
        ours = model(input_ids=ids, use_cache=True)
        theirs = ref(input_ids=ids, use_cache=True)
    assert ours.cache_params is not None
    torch.testing.assert_close(ours.logits, theirs.logits)


def test_causal_conv_matches_conv1d():
    torch.manual_seed(0)
    x = torch.randn(11, 3, 5)  # (T, B, C)
    conv = torch.nn.Conv1d(5, 5, kernel_size=4, groups=5, padding=3)
    expected = conv(x.permute(1, 2, 0))[..., :11].permute(2, 0, 1)
    torch.testing.assert_close(causal_depthwise_conv1d(x, conv.weight, conv.bias), expected)
    # Causal: the output at t does not depend on inputs after t.
    later = x.clone()
    later[6:] += 1.0
    out, out_later = (causal_depthwise_conv1d(v, conv.weight, conv.bias) for v in (x, later))
    torch.testing.assert_close(out[:6], out_later[:6])


def test_mamba_training_step_decreases_loss():
    model = build_model("mamba", "tiny", seed=0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (2, 64), generator=g)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(4):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1, losses
