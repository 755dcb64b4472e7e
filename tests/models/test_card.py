"""The families' cards: torch-free, equal to what the built models and the FLOP formulas give,
and their one layout rule (`layout_fits`) is the spec's verdict, word for word."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from greenbench.errors import SpecError
from greenbench.models import FAMILIES, family, layout_fits, model_info, model_preset
from greenbench.models import card as card_module
from greenbench.models.card import FamilyParts, TensorParallel
from greenbench.models.flops import flops_per_token

PRESETS = [(f, s) for f, card in FAMILIES.items() for s in card.presets]


def test_the_cards_and_the_planner_import_no_torch() -> None:
    code = (
        "import sys, greenbench.models, greenbench.planner.command, greenbench.planner.search\n"
        "for card in greenbench.models.FAMILIES.values():\n"
        "    card.preset('tiny'); card.layout_fits('tiny', 1, 1, 1, 64)\n"
        "    card.resolve_kernel('auto', 'cpu') if not card.kernel_choices else None\n"
        "loaded = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(("name", "size"), PRESETS)
def test_the_planner_preset_is_the_model_info(name: str, size: str) -> None:
    info = model_info(name, size)
    preset = model_preset(name, size)
    for field in ("n_params", "n_params_embedding", "n_layers", "d_model", "vocab_size",
                  "n_heads", "n_kv_heads", "d_ffn", "d_inner", "d_state"):  # fmt: skip
        assert getattr(preset, field) == getattr(info, field), field
    for seq_len in (1, 256, 4096, 131072):
        assert preset.flops_per_token(seq_len) == flops_per_token(info, seq_len)
    assert preset.tp_divides == FAMILIES[name].tp_divides(info)


@pytest.mark.parametrize(
    ("name", "size"),
    [("transformer", "7b"), ("transformer", "1b"), ("mamba", "tiny"), ("transformer", "125m"),
     ("mamba2", "tiny")],
)  # fmt: skip
def test_layout_fits_is_the_spec_verdict(name: str, size: str) -> None:
    from greenbench.settings.layout import check_degrees_fit_model

    settings = {"model.family": name, "model.size": size, "data.seq_len": 768}
    preset = model_preset(name, size)
    for tp, pp, cp in itertools.product((1, 2, 3, 4, 8, 64), (1, 4, 9, 22, 23, 65), (1, 2, 3, 5)):
        why = layout_fits(preset, tp, pp, cp, 768)
        try:
            check_degrees_fit_model(settings, {"tp": tp, "pp": pp, "cp": cp})
            refusal = None
        except SpecError as exc:
            refusal = str(exc)
        assert why == refusal, (tp, pp, cp)


def test_the_refusals_keep_their_words() -> None:
    fits = FAMILIES["mamba2"].layout_fits
    assert fits("tiny", 2, 1, 1, 768) == (
        "layout.tp=2 does not divide the 1 SSM groups (n_groups) of mamba2/tiny "
        "(each tensor-parallel rank holds whole SSM groups (n_groups))"
    )
    assert fits("tiny", 1, 1, 2, 768) is None
    assert fits("tiny", 2, 1, 2, 768) is not None  # the groups refuse tp before cp is asked
    assert FAMILIES["mamba"].layout_fits("tiny", 2, 1, 2, 768) == (
        "strategy=hybrid cannot combine layout.tp and layout.cp for mamba "
        "(both replace the mixer's forward); use one of them"
    )
    assert FAMILIES["transformer"].layout_fits("tiny", 2, 4, 2, 768) is None
    assert FAMILIES["transformer"].layout_fits("tiny", 1, 5, 1, 768) == (
        "layout.pp=5 is more than the 4 layers of transformer/tiny "
        "(each pipeline stage needs at least one layer)"
    )
    assert FAMILIES["transformer"].layout_fits("tiny", 1, 1, 5, 768) == (
        "layout.cp=5 does not divide data.seq_len=768 "
        "(each context-parallel rank holds an equal slice of the sequence)"
    )


def test_each_family_reaches_its_torch_parts_through_its_card(monkeypatch) -> None:
    for name, card in FAMILIES.items():
        assert isinstance(card.parts, FamilyParts)
        assert (card.parts.context_parallel is not None) == card.context_parallel, name
        assert card.pipeline_stage is not None
    # a family whose parts have no context-parallel form (every built-in one has one)
    bare = FamilyParts(build=None, blocks=list, tensor_parallel=TensorParallel())
    monkeypatch.setattr(card_module, "_parts", lambda module: bare)
    with pytest.raises(ValueError, match="no context-parallel form for model family 'mamba2'"):
        FAMILIES["mamba2"].enable_context_parallel(None, None, None)


def test_the_registry_lookup_survives_the_torch_side_being_imported() -> None:
    from greenbench.models import ModelBuilder, build_model

    assert ModelBuilder.__module__ == "greenbench.models.builder"
    assert build_model("transformer", "tiny", seed=0, device="meta") is not None
    assert family("mamba") is FAMILIES["mamba"]


def test_kernel_choices_are_checked_on_the_card() -> None:
    assert FAMILIES["transformer"].resolve_kernel("anything", "cpu") == "none"
    with pytest.raises(SpecError, match="Mamba-2 kernel"):
        FAMILIES["mamba"].resolve_kernel("fla", "cpu")
    with pytest.raises(SpecError, match="is a Mamba-1 kernel"):
        FAMILIES["mamba2"].resolve_kernel("native", "cpu")
    assert FAMILIES["mamba2"].resolve_kernel("auto", "cpu") == "torch"


def test_unknown_family_or_size_names_the_choices() -> None:
    with pytest.raises(SpecError, match=r"unknown model family 'gpt'.*mamba, mamba2, transformer"):
        model_preset("gpt", "7b")
    with pytest.raises(SpecError, match=r"unknown size '70b'.*7b"):
        model_preset("transformer", "70b")
    with pytest.raises(SpecError, match=r"unknown model family 'gpt'"):
        family("gpt")
