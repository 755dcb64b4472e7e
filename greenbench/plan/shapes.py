"""The model presets as the planner sees them: plain numbers, no torch.

`greenbench.models` describes each preset analytically (`ModelInfo`, FLOPs per token, what
tensor parallelism divides), but importing it imports torch and transformers, which takes
seconds (about 8 s on this project's 2-core machines) — longer than `greenbench plan`'s whole
budget of 5 s. So the planner keeps a **copy of the numbers** those functions give for every
preset, and ``tests/plan/test_shapes.py`` recomputes each one through `greenbench.models` and
fails when the two disagree: a preset added or changed there must be added here too. No formula
is copied: FLOPs per token are affine in the sequence length for every family
(Transformer ``6·N + 12·L·d·S``, Mamba and Mamba-2 ``6·N + scan``, see
`greenbench.models.flops`), so two stored coefficients reproduce them exactly.

`misfit` applies the rules `greenbench.spec.check_degrees_fit_model` applies to a layout (tp
divides what the family splits, pp at most the layers, cp divides the sequence); the same test
checks both give the same verdict on every preset and degree. It also refuses context
parallelism for a family the hybrid strategy has no CP form for (Mamba-2), as
`greenbench.strategies.hybrid.Hybrid.validate` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from greenbench.errors import SpecError
from greenbench.vocabulary import Layout


@dataclass(frozen=True, slots=True)
class ModelShape:
    """One preset: parameter counts and shapes (names as `ModelInfo`'s), FLOPs per token as
    ``flops_fixed + flops_per_seq_token × seq_len``, and what tp must divide."""

    family: str
    size: str
    n_params: int
    n_params_embedding: int
    n_layers: int
    d_model: int
    vocab_size: int
    flops_fixed: float
    flops_per_seq_token: float
    tp_divides: dict[str, int] = field(default_factory=dict)
    n_heads: int | None = None
    n_kv_heads: int | None = None
    d_ffn: int | None = None
    d_inner: int | None = None
    d_state: int | None = None
    n_groups: int | None = None  # Mamba-2: groups of heads sharing B and C
    chunk_size: int | None = None  # Mamba-2: the SSD scan's chunk length
    context_parallel: bool = True  # whether the hybrid strategy can split its sequence

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection: kv heads × head dim (Transformer only)."""
        if self.n_heads is None or self.n_kv_heads is None:
            return 0
        return self.n_kv_heads * (self.d_model // self.n_heads)

    def flops_per_token(self, seq_len: int) -> float:
        """Analytic training FLOPs per token at ``seq_len`` (`greenbench.models.flops`)."""
        return self.flops_fixed + self.flops_per_seq_token * seq_len

    def params_per_layer(self) -> float:
        """Parameters of one repeated block (everything but embedding, final norm and head)."""
        return (self.n_params - self.n_params_embedding - self.head_params) / self.n_layers

    @property
    def head_params(self) -> int:
        """The final norm and the (untied) LM head."""
        return self.vocab_size * self.d_model + self.d_model

    def norm_params_per_layer(self) -> int:
        """Parameters of a block's RMSNorms (two in a Llama block, one in a Mamba or Mamba-2
        block): the part of a block tensor parallelism leaves whole on every rank."""
        return self.d_model if self.family in ("mamba", "mamba2") else 2 * self.d_model

    @property
    def dt_rank(self) -> int:
        """Mamba's Δ projection rank, ``ceil(d / 16)`` (MambaConfig's "auto"); 0 otherwise."""
        return -(-self.d_model // 16) if self.family == "mamba" else 0


def _t(size: str, n: int, emb: int, layers: int, d: int, heads: int, kv: int, ffn: int, a: float,
       b: float, vocab: int = 32000) -> ModelShape:  # fmt: skip
    return ModelShape(
        "transformer", size, n, emb, layers, d, vocab, a, b,
        {"attention heads": heads, "key/value heads": kv},
        n_heads=heads, n_kv_heads=kv, d_ffn=ffn,
    )  # fmt: skip


def _m(size: str, n: int, emb: int, layers: int, d: int, inner: int, a: float,
       vocab: int = 32000) -> ModelShape:  # fmt: skip
    return ModelShape(
        "mamba", size, n, emb, layers, d, vocab, a, 0.0,
        {"inner channels (d_inner)": inner}, d_inner=inner, d_state=16,
    )  # fmt: skip


def _m2(size: str, n: int, emb: int, layers: int, d: int, inner: int, heads: int, state: int,
        chunk: int, a: float, vocab: int = 32000) -> ModelShape:  # fmt: skip
    return ModelShape(
        "mamba2", size, n, emb, layers, d, vocab, a, 0.0, {"SSM groups (n_groups)": 1},
        n_heads=heads, d_inner=inner, d_state=state, n_groups=1, chunk_size=chunk,
        context_parallel=False,
    )  # fmt: skip


#: family -> size -> shape; the numbers `greenbench.models` gives (checked by a test)
PRESETS: dict[str, dict[str, ModelShape]] = {
    "transformer": {
        s.size: s
        for s in (
            _t("tiny", 3934464, 262144, 4, 256, 8, 8, 768, 22033920.0, 12288.0, vocab=1024),
            _t("125m", 134105856, 24576000, 12, 768, 12, 12, 2048, 657179136.0, 110592.0),
            _t("350m", 373867520, 32768000, 24, 1024, 16, 16, 2816, 2046597120.0, 294912.0),
            _t("1b", 1100048384, 65536000, 22, 2048, 32, 4, 5632, 6207074304.0, 540672.0),
            _t("7b", 6738415616, 131072000, 32, 4096, 32, 32, 11008, 39644061696.0, 1572864.0),
        )
    },
    "mamba": {
        s.size: s
        for s in (
            _m("tiny", 4028672, 262144, 8, 256, 512, 24393216.0, vocab=1024),
            _m("125m", 139672320, 24576000, 24, 768, 1536, 706724352.0),
            _m("350m", 385565696, 32768000, 48, 1024, 2048, 2159843328.0),
            _m("1b", 1082976256, 65536000, 36, 2048, 4096, 6169227264.0),
            _m("7b", 7002132480, 131072000, 64, 4096, 8192, 41456001024.0),
        )
    },
    "mamba2": {
        s.size: s
        for s in (
            _m2("tiny", 3980736, 262144, 8, 256, 512, 8, 64, 64, 27226752.0, vocab=1024),
            _m2("125m", 139520448, 24576000, 24, 768, 1536, 24, 128, 256, 807631488.0),
            _m2("350m", 382387712, 32768000, 48, 1024, 2048, 32, 128, 256, 2409145344.0),
            _m2("1b", 1113346688, 65536000, 38, 2048, 4096, 64, 128, 256, 6772485888.0),
            _m2("7b", 6808776704, 131072000, 64, 4096, 8192, 128, 128, 256, 41689423872.0),
        )
    },
}


def model_shape(family: str, size: str) -> ModelShape:
    """The preset ``size`` of ``family``; SpecError naming the choices otherwise."""
    if family not in PRESETS:
        raise SpecError(
            f"unknown model family {family!r}; choose one of: {', '.join(sorted(PRESETS))}"
        )
    if size not in PRESETS[family]:
        raise SpecError(
            f"unknown size {size!r} for model family {family!r}; "
            f"choose one of: {', '.join(PRESETS[family])}"
        )
    return PRESETS[family][size]


def misfit(shape: ModelShape, layout: Layout, seq_len: int) -> str | None:
    """Why ``layout`` cannot split ``shape`` at ``seq_len`` (the spec's rules), or None."""
    for what, n in shape.tp_divides.items():
        if n % layout.tp:
            return f"tp={layout.tp} does not divide the {n} {what}"
    if layout.pp > shape.n_layers:
        return f"pp={layout.pp} is more than the {shape.n_layers} layers"
    if seq_len % layout.cp:
        return f"cp={layout.cp} does not divide seq_len={seq_len}"
    if layout.cp > 1 and not shape.context_parallel:
        return f"cp={layout.cp}: {shape.family} has no context-parallel form"
    return None
