"""The ``model`` section: which family and size to build, its kernels (settings every model
family shares; each family checks the values it accepts)."""

from __future__ import annotations

from greenbench.config import ALWAYS, Config, section, setting, when
from greenbench.errors import SpecError


def _families() -> list[str]:
    from greenbench.models import FAMILIES

    return list(FAMILIES)


def _kernels() -> list[str]:
    """``auto`` and every kernel some family accepts (`greenbench.models.ModelCard`)."""
    from greenbench.models import FAMILIES

    return ["auto", *{k for card in FAMILIES.values() for k in card.kernel_choices}]


@section("model", "The model greenbench builds (randomly initialised).", built_in_only=True)
class ModelSettings:
    family: str = setting("transformer", "the model family", registry=_families, identity=ALWAYS)
    size: str = setting(
        "tiny", "a preset of the family (greenbench list model-families)", identity=ALWAYS
    )
    scan: str = setting(
        "auto",
        "the scan kernel of a state-space family: auto (the fastest this machine runs) or one "
        "of the family's own (each family checks its choices)",
        registry=_kernels,
        identity=ALWAYS,
    )
    liger: str = setting(
        "auto",
        "liger-kernel's fused norm, RoPE, SwiGLU and linear cross-entropy for the Transformer: "
        "auto (on where it is installed, on CUDA under single, ddp or fsdp, in runs not compiled) "
        "| on | off",
        choices=("auto", "on", "off"),
        identity=when(lambda s: s.get("model.liger") == "on"),
    )

    def check(self, config: Config) -> None:
        from greenbench.models import FAMILIES

        sizes = FAMILIES[self.family].presets
        if self.size not in sizes:
            raise SpecError(
                f"model.size={self.size!r} is not a {self.family} preset ({', '.join(sizes)})"
            )
