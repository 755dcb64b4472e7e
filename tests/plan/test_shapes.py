"""The planner's torch-free copy of the presets equals what `greenbench.models` computes, and
its layout rules give the spec's verdicts. (This test imports torch; the planner does not.)"""

from __future__ import annotations

import itertools

import pytest

from greenbench.errors import SpecError
from greenbench.plan.shapes import PRESETS, misfit, model_shape
from greenbench.vocabulary import Layout

models = pytest.importorskip("greenbench.models")


def test_every_family_and_preset_is_copied() -> None:
    assert {f: set(fam.presets) for f, fam in models.FAMILIES.items()} == {
        f: set(sizes) for f, sizes in PRESETS.items()
    }


@pytest.mark.parametrize(
    ("family", "size"),
    [(f, s) for f, fam in models.FAMILIES.items() for s in fam.presets],
)
def test_the_copy_matches_the_models(family: str, size: str) -> None:
    from greenbench.models.flops import flops_per_token

    info = models.model_info(family, size)
    shape = model_shape(family, size)
    for name in ("n_params", "n_params_embedding", "n_layers", "d_model", "vocab_size",
                 "n_heads", "n_kv_heads", "d_ffn", "d_inner", "d_state"):  # fmt: skip
        assert getattr(shape, name) == getattr(info, name), name
    for seq_len in (1, 256, 4096, 131072):
        assert shape.flops_per_token(seq_len) == pytest.approx(
            flops_per_token(info, seq_len), rel=1e-12
        )
    assert shape.tp_divides == models.FAMILIES[family].tensor_parallel.divides(info)


@pytest.mark.parametrize(
    ("family", "size"),
    [("transformer", "7b"), ("transformer", "1b"), ("mamba", "tiny"), ("transformer", "125m")],
)
def test_misfit_agrees_with_the_spec(family: str, size: str) -> None:
    from greenbench.spec import check_degrees_fit_model

    shape = model_shape(family, size)
    settings = {"model.family": family, "model.size": size, "data.seq_len": 768}
    for tp, pp, cp in itertools.product((1, 2, 3, 4, 8, 64), (1, 4, 22, 23, 65), (1, 3, 5)):
        layout = Layout(tp=tp, pp=pp, cp=cp)
        try:
            check_degrees_fit_model(settings, {"tp": tp, "pp": pp, "cp": cp})
            spec_ok = True
        except SpecError:
            spec_ok = False
        assert (misfit(shape, layout, 768) is None) == spec_ok, layout.text


def test_mamba2_has_the_spec_verdicts_and_no_context_parallelism() -> None:
    """The spec refuses mamba2's tp (one group); the hybrid strategy refuses its cp."""
    from greenbench.spec import check_degrees_fit_model

    shape = model_shape("mamba2", "tiny")
    settings = {"model.family": "mamba2", "model.size": "tiny", "data.seq_len": 768}
    for tp, pp in itertools.product((1, 2, 4), (1, 4, 9)):
        try:
            check_degrees_fit_model(settings, {"tp": tp, "pp": pp})
            spec_ok = True
        except SpecError:
            spec_ok = False
        assert (misfit(shape, Layout(tp=tp, pp=pp), 768) is None) == spec_ok
    assert misfit(shape, Layout(cp=2), 768) == "cp=2: mamba2 has no context-parallel form"


def test_unknown_family_or_size_names_the_choices() -> None:
    with pytest.raises(SpecError, match=r"unknown model family 'gpt'.*mamba, mamba2, transformer"):
        model_shape("gpt", "7b")
    with pytest.raises(SpecError, match=r"unknown size '70b'.*7b"):
        model_shape("transformer", "70b")
