"""Model families: the registry of their cards, a builder and an analytic describer.

Each family is a package whose ``card.py`` holds its `ModelCard` (torch-free: presets,
`ModelInfo`, FLOPs, which layouts fit, the planner's terms, kernel choices); the torch parts are
reached through the card when first asked for. Importing this package imports no torch: the
planner and the spec read the cards, and `build_model` and `ModelBuilder` import the torch side
(`greenbench.models.builder`) when used. Adding a family is one new package and one line in
`FAMILIES`.
"""

from __future__ import annotations

import importlib
from typing import Any

from greenbench.errors import SpecError
from greenbench.models.card import (
    FamilyParts,
    ModelCard,
    ModelInfo,
    ModelPreset,
    PlannerTerms,
    TensorParallel,
    layout_fits,
    unknown_family,
)
from greenbench.models.mamba.card import CARD as MAMBA
from greenbench.models.mamba2.card import CARD as MAMBA2
from greenbench.models.transformer.card import CARD as TRANSFORMER

FAMILIES: dict[str, ModelCard] = {
    "transformer": TRANSFORMER,
    "mamba": MAMBA,
    "mamba2": MAMBA2,
}

#: names of the torch side, imported from `greenbench.models.builder` on first access
_TORCH_NAMES = ("ModelBuilder",)

__all__ = [
    "FAMILIES",
    "FamilyParts",
    "ModelBuilder",
    "ModelCard",
    "ModelInfo",
    "ModelPreset",
    "PlannerTerms",
    "TensorParallel",
    "build_model",
    "family",
    "layout_fits",
    "model_info",
    "model_preset",
]


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        return getattr(importlib.import_module("greenbench.models.builder"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def family(name: str) -> ModelCard:
    """The registered family ``name``'s card; SpecError naming the choices otherwise."""
    if name not in FAMILIES:
        raise unknown_family(name, FAMILIES)
    return FAMILIES[name]


def _family(name: str, size: str) -> ModelCard:
    card = family(name)
    if size not in card.presets:
        raise SpecError(
            f"unknown size {size!r} for model family {name!r}; "
            f"choose one of: {', '.join(card.presets)}"
        )
    return card


def _check_vocab(vocab_size: int | None) -> None:
    if vocab_size is not None and (isinstance(vocab_size, bool) or vocab_size < 2):
        raise SpecError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")


def build_model(
    family: str,
    size: str,
    *,
    vocab_size: int | None = None,
    seed: int,
    device: Any = None,
    kernel: str = "auto",
) -> Any:
    """A randomly initialised causal LM of ``family`` at preset ``size``, in float32 (a
    ``torch.nn.Module``; torch is imported here, not with this package).

    ``torch.manual_seed(seed)`` is called right before construction, so the same (family, size,
    vocab_size, seed) gives the same weights. ``vocab_size`` overrides the preset's vocabulary
    (e.g. to match a data stream). ``device`` (a name or ``torch.device``) builds directly there
    (``"meta"`` builds nothing). ``kernel`` picks the family's kernel backend where it has a
    choice (Mamba's and Mamba-2's scan).
    Raises `SpecError` for an unknown family or size.
    """
    card = _family(family, size)
    _check_vocab(vocab_size)
    builder = importlib.import_module("greenbench.models.builder").ModelBuilder
    return builder(card, size, seed, kernel, vocab_size).build(device)


def model_info(family: str, size: str, *, vocab_size: int | None = None) -> ModelInfo:
    """Analytic `ModelInfo` of a preset, without building it. Raises `SpecError` if unknown."""
    card = _family(family, size)
    _check_vocab(vocab_size)
    return card.info(size, vocab_size=vocab_size)


def model_preset(family: str, size: str) -> ModelPreset:
    """Preset ``size`` of ``family`` as the planner reads it. Raises `SpecError` if unknown."""
    return _family(family, size).preset(size)
