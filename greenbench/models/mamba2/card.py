"""Mamba-2's card: its presets, `ModelInfo`, FLOPs, what tensor parallelism would divide, the
planner's terms and its scan choices, without torch (`greenbench.models.card`).

Presets are matched in total parameter count (within ~5%) to the Transformer presets of the same
name. ``125m`` and ``350m`` are the published checkpoints' shapes (huggingface.co/state-spaces/
mamba2-130m: d 768 × 24 layers; mamba2-370m: d 1024 × 48 layers), which also makes them the same
size as the Mamba-1 presets of the same name (within 0.2% and 1%); ``1b`` and ``7b`` keep their
widths and take the layer count that matches the Transformer. Mamba-2's usual block: expand 2,
head dim 64, state size 128, one group of B and C shared by all heads, conv 4, untied LM head.
``tiny`` (vocab 1024, d 256, 8 layers) uses state size 64 to stay CPU-fast.

The chunk length Q of the SSD scan is part of a preset (it sets the scan's FLOPs, see
`greenbench.models.mamba2.flops`): 256 from ``125m`` up, Mamba-2's default (mamba-ssm's
``Mamba2`` module and the published configs); 64 for ``tiny``, where the torch scan is fastest
on a CPU (`greenbench.models.mamba2.ssd`). fla's kernel tiles by its own 64 whatever Q is.

Tensor parallelism splits Mamba-2 by whole groups of heads (`greenbench.models.mamba2.parallel`),
so ``tp`` must divide ``n_groups``: `tp_divides` names the groups, and as every preset has one
group, the spec refuses any tp > 1 on them; the split is checked on a two-group model built by
hand. The context-parallel form (`greenbench.models.mamba2.context_parallel`) passes the conv's
halo and the SSD scan's state between the ranks' chunks, as Mamba-1's does; the two do not
combine (both replace the mixer's forward). Scan choices
(``model.scan``): ``torch``, ``fla``, ``mamba-ssm`` and ``auto``, resolved on a device by
`greenbench.models.mamba2.kernels`.
"""

from __future__ import annotations

from dataclasses import dataclass

from greenbench.errors import SpecError
from greenbench.models.card import ModelCard, ModelInfo, PlannerTerms
from greenbench.models.mamba2.flops import mamba2_flops_per_token, mamba2_scan_flops_per_token

#: the ``model.scan`` values Mamba-2 accepts besides ``auto``
CHOICES = ("torch", "fla", "mamba-ssm")


@dataclass(frozen=True)
class Mamba2Preset:
    d_model: int
    n_layers: int
    vocab_size: int
    d_state: int = 128
    head_dim: int = 64
    expand: int = 2
    n_groups: int = 1
    d_conv: int = 4
    chunk_size: int = 256

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def n_heads(self) -> int:
        return self.d_inner // self.head_dim


PRESETS: dict[str, Mamba2Preset] = {
    "tiny": Mamba2Preset(d_model=256, n_layers=8, vocab_size=1024, d_state=64, chunk_size=64),
    "125m": Mamba2Preset(d_model=768, n_layers=24, vocab_size=32000),
    "350m": Mamba2Preset(d_model=1024, n_layers=48, vocab_size=32000),
    "1b": Mamba2Preset(d_model=2048, n_layers=38, vocab_size=32000),
    "7b": Mamba2Preset(d_model=4096, n_layers=64, vocab_size=32000),
}


def info(size: str, *, vocab_size: int | None = None) -> ModelInfo:
    """Analytic parameter counts and shape of a preset (equal to the built model's counts)."""
    p = PRESETS[size]
    vocab = vocab_size or p.vocab_size
    d, d_inner, n, heads = p.d_model, p.d_inner, p.d_state, p.n_heads
    conv_dim = d_inner + 2 * p.n_groups * n  # the conv runs over x, B and C
    per_layer = (
        d  # RMSNorm
        + d * (2 * d_inner + 2 * p.n_groups * n + heads)  # in_proj -> gate, x, B, C, dt; no bias
        + (conv_dim * p.d_conv + conv_dim)  # depthwise conv1d weight + bias
        + 3 * heads  # dt_bias, A_log, D: one per head
        + d_inner  # gated RMSNorm
        + d_inner * d  # out_proj, no bias
    )
    return ModelInfo.of_stack(
        "mamba2",
        size,
        n_layers=p.n_layers,
        d_model=d,
        vocab_size=vocab,
        per_layer=per_layer,
        n_heads=heads,
        d_inner=d_inner,
        d_state=n,
        d_conv=p.d_conv,
        n_groups=p.n_groups,
        chunk_size=p.chunk_size,
    )


def tp_divides(info: ModelInfo) -> dict[str, int]:
    """What a tensor-parallel degree must divide: each rank holds whole groups of heads."""
    return {"SSM groups (n_groups)": info.n_groups or 1}


def check_scan(setting: str) -> None:
    """Refuse a ``model.scan`` value Mamba-2 does not accept (SpecError)."""
    if setting in ("native", "triton"):
        raise SpecError(
            f"model.scan={setting} is a Mamba-1 kernel; Mamba-2 (model.family=mamba2) scans with "
            f"one of auto, {', '.join(CHOICES)}"
        )
    if setting not in ("auto", *CHOICES):
        raise SpecError(f"model.scan={setting!r} is not one of auto, {', '.join(CHOICES)}")


def activations(info: ModelInfo, cp: int) -> tuple[float, float]:
    """Elements a Mamba-2 block on the torch SSD scan keeps per token: its RMSNorm whole; split
    by tp (each rank's whole groups): ``in_proj``'s output, the conv's padded input, output and
    SiLU output, the decay mask, masked scores and ``C·Bᵀ``, nine inner-width tensors, the
    chunks' start states twice and ~5 per-head scalars; under context parallelism also the
    start-state correction's product and decays (an inner-width tensor and a per-head one)."""
    d, inner, n, heads = info.d_model, info.d_inner or 0, info.d_state or 0, info.n_heads or 0
    groups, chunk = info.n_groups or 1, info.chunk_size or 1
    split = (
        2 * inner + 2 * groups * n + heads  # in_proj's output
        + 3.0 * (inner + 2 * groups * n)  # the conv: padded input, output, SiLU
        + 2.0 * heads * chunk + groups * chunk  # decay mask, masked scores, C·Bᵀ
        + 9.0 * inner + 2.0 * inner * n / chunk + 5.0 * heads
        + (inner + heads if cp > 1 else 0.0)  # the correction for the chunk's start state
    )  # fmt: skip
    return 3.0 * d + 1, split


def cp_correction_flops(info: ModelInfo) -> float:
    """FLOPs per token the context-parallel form adds to a block's scan, an estimate: the
    start-state correction ``exp(cs_t) · (S0 C_t)`` is one product of 2·N·D per token forward
    (D = d_inner), and twice that backward: 6·N·D in training."""
    return 6.0 * (info.d_inner or 0) * (info.d_state or 0)


def tp_all_reduces(info: ModelInfo) -> tuple[tuple[int, int], ...]:
    """``out_proj``'s output all-reduced forward and the mixer input's gradient backward, both
    ``d`` wide (`greenbench.models.mamba2.parallel`)."""
    return ((2, info.d_model),)


CARD = ModelCard(
    name="mamba2",
    presets=PRESETS,
    describe=info,
    flops=mamba2_flops_per_token,
    tp_divides=tp_divides,
    planner=PlannerTerms(
        norms_per_block=1,
        activations=activations,
        tp_all_reduces=tp_all_reduces,
        # the scan state (heads × head dim × d_state = d_inner × d_state, fp32) passed along
        # the ranks forward and back; the conv's halo (d_conv − 1 tokens) is left out, as
        # Mamba-1's is
        cp_passes=2,
        cp_message=lambda info: (0.0, (info.d_inner or 0) * (info.d_state or 0) * 4),
        kernel="scan",
        kernel_flops=lambda info, seq_len: mamba2_scan_flops_per_token(info) / info.n_layers,
        cp_kernel_flops=cp_correction_flops,
    ),
    parts_module="greenbench.models.mamba2.parts",
    context_parallel=True,
    cp_name="SSD scan state and conv halo passed between chunks",
    cp_layout="contiguous",  # the scan carries its state from chunk to chunk, in row order
    tp_with_cp=False,  # both replace the mixer's forward
    kernel_choices=CHOICES,
    check_kernel=check_scan,
    kernels_module="greenbench.models.mamba2.kernels",
)
