"""Model families: the registry, a builder and an analytic describer.

Each family is a package keeping the contract of `greenbench.models.family.ModelFamily`; adding
one is one new package and one line in `FAMILIES`.
"""

from __future__ import annotations

import torch

from greenbench.errors import SpecError
from greenbench.models import mamba, mamba2, transformer
from greenbench.models.family import ModelBuilder, ModelFamily, ModelInfo, TensorParallel

FAMILIES: dict[str, ModelFamily] = {
    "transformer": transformer.FAMILY,
    "mamba": mamba.FAMILY,
    "mamba2": mamba2.FAMILY,
}

__all__ = [
    "FAMILIES",
    "ModelBuilder",
    "ModelFamily",
    "ModelInfo",
    "TensorParallel",
    "build_model",
    "family",
    "model_info",
]


def family(name: str) -> ModelFamily:
    """The registered family ``name``; SpecError naming the choices otherwise."""
    if name not in FAMILIES:
        raise SpecError(
            f"unknown model family {name!r}; choose one of: {', '.join(sorted(FAMILIES))}"
        )
    return FAMILIES[name]


def _family(family: str, size: str) -> ModelFamily:
    if family not in FAMILIES:
        raise SpecError(
            f"unknown model family {family!r}; choose one of: {', '.join(sorted(FAMILIES))}"
        )
    fam = FAMILIES[family]
    if size not in fam.presets:
        raise SpecError(
            f"unknown size {size!r} for model family {family!r}; "
            f"choose one of: {', '.join(fam.presets)}"
        )
    return fam


def _check_vocab(vocab_size: int | None) -> None:
    if vocab_size is not None and (isinstance(vocab_size, bool) or vocab_size < 2):
        raise SpecError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")


def build_model(
    family: str,
    size: str,
    *,
    vocab_size: int | None = None,
    seed: int,
    device: str | torch.device | None = None,
    kernel: str = "auto",
) -> torch.nn.Module:
    """A randomly initialised causal LM of ``family`` at preset ``size``, in float32.

    ``torch.manual_seed(seed)`` is called right before construction, so the same (family, size,
    vocab_size, seed) gives the same weights. ``vocab_size`` overrides the preset's vocabulary
    (e.g. to match a data stream). ``device`` builds directly there (``"meta"`` builds nothing).
    ``kernel`` picks the family's kernel backend where it has a choice (Mamba's and Mamba-2's
    scan).
    Raises `SpecError` for an unknown family or size.
    """
    fam = _family(family, size)
    _check_vocab(vocab_size)
    return ModelBuilder(fam, size, seed, kernel, vocab_size).build(device)


def model_info(family: str, size: str, *, vocab_size: int | None = None) -> ModelInfo:
    """Analytic `ModelInfo` of a preset, without building it. Raises `SpecError` if unknown."""
    fam = _family(family, size)
    _check_vocab(vocab_size)
    return fam.info(size, vocab_size=vocab_size)
