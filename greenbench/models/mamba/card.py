"""Mamba's card: its presets, `ModelInfo`, FLOPs, what tensor parallelism divides, the planner's
terms and its scan choices, without torch (`greenbench.models.card`).

Presets are matched in total parameter count (within ~5%) to the Transformer presets of the same
name; the small ones reuse the published checkpoints' shapes (huggingface.co/state-spaces/
mamba-130m: d 768 × 24 layers; mamba-370m: d 1024 × 48 layers). A Mamba block holds ~6·d²
parameters to a Llama block's ~12·d², so a Mamba preset has about twice the layers of its
Transformer twin. State size 16, expand 2, conv 4, untied LM head (as for the Transformer, so
both count the head the same way in FLOPs). The model is built in `greenbench.models.mamba.model`.

Scan choices (``model.scan``): ``native`` (greenbench's C kernel, CPU), ``torch`` (the exact
stepping scan, any device), ``triton`` (greenbench's Triton kernels), ``mamba-ssm`` (CUDA), and
``auto``; which one runs on a device is resolved by `greenbench.models.mamba.kernels`.
"""

from __future__ import annotations

from dataclasses import dataclass

from greenbench.errors import SpecError
from greenbench.models.card import ModelCard, ModelInfo, PlannerTerms
from greenbench.models.mamba.flops import mamba_flops_per_token, mamba_scan_flops_per_token

#: the ``model.scan`` values Mamba accepts besides ``auto``
CHOICES = ("native", "torch", "triton", "mamba-ssm")

#: steps between the states greenbench's chunked scan saves for backward (its default chunk,
#: `greenbench.models.mamba.scan.DEFAULT_CHUNK_SIZE`)
SCAN_CHUNK = 32


@dataclass(frozen=True)
class MambaPreset:
    d_model: int
    n_layers: int
    vocab_size: int
    d_state: int = 16
    expand: int = 2
    d_conv: int = 4


PRESETS: dict[str, MambaPreset] = {
    "tiny": MambaPreset(d_model=256, n_layers=8, vocab_size=1024),
    "125m": MambaPreset(d_model=768, n_layers=24, vocab_size=32000),
    "350m": MambaPreset(d_model=1024, n_layers=48, vocab_size=32000),
    "1b": MambaPreset(d_model=2048, n_layers=36, vocab_size=32000),
    "7b": MambaPreset(d_model=4096, n_layers=64, vocab_size=32000),
}


def info(size: str, *, vocab_size: int | None = None) -> ModelInfo:
    """Analytic parameter counts and shape of a preset (equal to the built model's counts)."""
    p = PRESETS[size]
    vocab = vocab_size or p.vocab_size
    d, d_inner, n = p.d_model, p.expand * p.d_model, p.d_state
    dt_rank = -(-d // 16)  # ceil(d / 16), MambaConfig's "auto"
    per_layer = (
        d  # RMSNorm
        + d * 2 * d_inner  # in_proj (x and gate), no bias
        + (d_inner * p.d_conv + d_inner)  # depthwise conv1d weight + bias
        + d_inner * (dt_rank + 2 * n)  # x_proj -> (dt, B, C), no bias
        + (dt_rank * d_inner + d_inner)  # dt_proj weight + bias
        + (d_inner * n + d_inner)  # A_log, D
        + d_inner * d  # out_proj, no bias
    )
    return ModelInfo.of_stack(
        "mamba",
        size,
        n_layers=p.n_layers,
        d_model=d,
        vocab_size=vocab,
        per_layer=per_layer,
        d_inner=d_inner,
        d_state=n,
        d_conv=p.d_conv,
        dt_rank=dt_rank,
    )


def tp_divides(info: ModelInfo) -> dict[str, int]:
    """What a tensor-parallel degree must divide: each rank holds whole inner channels."""
    return {"inner channels (d_inner)": info.d_inner or 0}


def check_scan(setting: str) -> None:
    """Refuse a ``model.scan`` value Mamba does not accept (SpecError)."""
    if setting == "fla":
        raise SpecError(
            "model.scan=fla is flash-linear-attention's Mamba-2 kernel; Mamba-1 (model.family="
            f"mamba) scans with one of auto, {', '.join(CHOICES)}"
        )
    if setting not in ("auto", *CHOICES):
        raise SpecError(f"model.scan={setting!r} is not one of auto, {', '.join(CHOICES)}")


def activations(info: ModelInfo, cp: int) -> tuple[float, float]:
    """Elements a Mamba block keeps per token (whole, split by tp): its RMSNorm, ``x_proj``'s
    output and the scan's B and C whole; nine inner-width tensors and the chunked scan's saved
    states split."""
    d, inner, n = info.d_model, info.d_inner or 0, info.d_state or 0
    return 3.0 * d + 1 + (info.dt_rank or 0) + 4.0 * n, 9.0 * inner + n * inner / SCAN_CHUNK


def cp_correction_flops(info: ModelInfo) -> float:
    """FLOPs per token the context-parallel form adds to a block's scan, an estimate: the
    start-state correction ``y_t += Σ_n C_t[n]·exp(S_t)[d, n]·h0[d, n]`` costs about 4·D·n
    forward (the exponential, two products, the sum), run again in backward under
    checkpointing and differentiated there (about twice the forward): 16·D·n in training."""
    return 16.0 * (info.d_inner or 0) * (info.d_state or 0)


def tp_all_reduces(info: ModelInfo) -> tuple[tuple[int, int], ...]:
    """Forward all-reduces of ``x_proj``'s output (``dt_rank + 2·d_state`` wide) and
    ``out_proj``'s (``d``), and the same two sizes backward."""
    return ((2, info.d_model), (2, (info.dt_rank or 0) + 2 * (info.d_state or 0)))


CARD = ModelCard(
    name="mamba",
    presets=PRESETS,
    describe=info,
    flops=mamba_flops_per_token,
    tp_divides=tp_divides,
    planner=PlannerTerms(
        norms_per_block=1,
        activations=activations,
        tp_all_reduces=tp_all_reduces,
        # the scan state (d_inner × d_state, fp32) passed along the ranks forward and back
        cp_passes=2,
        cp_message=lambda info: (0.0, (info.d_inner or 0) * (info.d_state or 0) * 4),
        # A and −A, once per block
        activation_constant=lambda info: 2.0 * (info.d_inner or 0) * (info.d_state or 0),
        kernel="scan",
        kernel_flops=lambda info, seq_len: mamba_scan_flops_per_token(info) / info.n_layers,
        cp_kernel_flops=cp_correction_flops,
    ),
    parts_module="greenbench.models.mamba.parts",
    context_parallel=True,
    cp_name="scan state and conv halo passed between chunks",
    cp_layout="contiguous",  # the scan carries its state from chunk to chunk, in row order
    tp_with_cp=False,  # both replace the mixer's forward
    kernel_choices=CHOICES,
    check_kernel=check_scan,
    kernels_module="greenbench.models.mamba.kernels",
)
