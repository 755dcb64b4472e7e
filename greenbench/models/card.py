"""A model family's card: everything about the family that needs no torch.

A family (``transformer``, ``mamba``, ``mamba2``) is one package whose ``card.py`` holds a
`ModelCard`: its size presets (like torchtitan's flavours) and `ModelInfo`, an analytic
description of a preset (parameter counts and the shapes the FLOP formulas need, so the planner,
the dashboard and MFU use it without building a model); FLOPs per token; which layouts fit a
preset (`layout_fits`, the one rule the spec, the planner and the hybrid strategy apply); the
planner's coefficients for the family (`PlannerTerms`); its kernel choices (the ``model.scan``
values it accepts, checked here, resolved on a device by its kernels module); and which run
options suit it (compiled blocks by default, fused kernels).

Everything that needs torch — the model builder, the blocks FSDP wraps one by one and a pipeline
cuts between, the tensor-, pipeline- and context-parallel forms, the fused kernels — is the
family's `FamilyParts`, in a module the card only names (``ModelCard.parts_module``) and imports
the first time one of them is asked for. Importing a card, or `greenbench.models`, therefore
imports no torch, and `greenbench plan` answers in well under a second.

Adding a family is one new package with a ``card.py`` and a parts module, and one line in
`greenbench.models.FAMILIES`.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from greenbench.errors import SpecError


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Analytic description of one model preset.

    ``n_params`` counts every trainable parameter once. ``n_params_embedding`` is the input
    embedding table only (vocab_size × d_model). ``n_params_non_embedding`` is the rest, and
    includes the LM head: both families are built with untied embeddings, so the head is its own
    matrix and its matmul is real compute (torchtitan's and the PaLM appendix's convention).
    Family-specific fields are ``None`` where they do not apply.
    """

    family: str
    size: str
    n_params: int
    n_params_embedding: int
    n_params_non_embedding: int
    n_layers: int
    d_model: int
    vocab_size: int
    # Transformer: attention heads; Mamba-2: SSM heads (d_inner / head dim).
    n_heads: int | None = None
    # Transformer only.
    n_kv_heads: int | None = None
    d_ffn: int | None = None
    # Mamba and Mamba-2.
    d_inner: int | None = None  # expand × d_model: channels of the selective scan
    d_state: int | None = None  # N, the SSM state size per channel (Mamba-2: per head channel)
    d_conv: int | None = None
    # Mamba only.
    dt_rank: int | None = None
    # Mamba-2 only.
    n_groups: int | None = None  # groups of heads sharing one B and one C
    chunk_size: int | None = None  # Q, the SSD scan's chunk length (sets its FLOPs)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def of_stack(
        cls,
        family: str,
        size: str,
        *,
        n_layers: int,
        d_model: int,
        vocab_size: int,
        per_layer: int,
        **shape: int,
    ) -> ModelInfo:
        """The counts of a stack of ``n_layers`` blocks of ``per_layer`` parameters between an
        embedding table and a final RMSNorm and untied LM head, with the family's ``shape``."""
        embedding = vocab_size * d_model
        non_embedding = n_layers * per_layer + d_model + vocab_size * d_model
        return cls(
            family=family, size=size, n_params=embedding + non_embedding,
            n_params_embedding=embedding, n_params_non_embedding=non_embedding,
            n_layers=n_layers, d_model=d_model, vocab_size=vocab_size, **shape,
        )  # fmt: skip

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection: kv heads × head dim (Transformer only, else 0)."""
        if self.n_heads is None or self.n_kv_heads is None:
            return 0
        return self.n_kv_heads * (self.d_model // self.n_heads)


def _no_elements(info: ModelInfo) -> float:
    return 0.0


def _no_attention(info: ModelInfo, seq_len: int) -> float:
    return 0.0


@dataclass(frozen=True)
class PlannerTerms:
    """What the planner's cost and memory models (`greenbench.planner.cost`,
    `greenbench.planner.memory`) need to know of a family beyond its `ModelInfo`, as functions
    of a preset's info.

    * ``norms_per_block``: RMSNorms in one block (each ``d_model`` weights tensor parallelism
      leaves whole on every rank);
    * ``activations(info, cp)``: elements one block keeps for backward per token, as (whole on
      every tp rank, split by tp), at context-parallel degree ``cp``;
    * ``activation_constant(info)``: elements one block keeps whatever the tokens (split by tp);
    * ``tp_all_reduces(info)``: the tensor-parallel split's all-reduces per block and
      microbatch, forward and backward, as (calls, elements per token);
    * ``cp_passes`` and ``cp_message(info)``: the context-parallel form's point-to-point
      messages per block and microbatch, ``cp_passes × (cp − 1)`` of them, each (elements per
      token in the activation dtype, fp32 bytes per sequence), divided by tp;
    * ``kernel`` and ``kernel_flops(info, seq_len)``: the block's sequence-mixing term, which a
      per-family calibration prices at a rate of its own apart from the matrix products
      (``"attention"``, ``"scan"``; "" for none), and its training FLOPs per token and block as
      the family's FLOP count has it (the rest of a block's FLOPs are ``6 ×`` its parameters);
    * ``causal``: the kernel is a causal product over the sequence (attention), so a token
      attends to the keys before it only: the planner discounts it and prices the context
      split's imbalance (`greenbench.planner.rates`);
    * ``cp_kernel_flops(info)``: training FLOPs per token and block the context-parallel form
      adds to the kernel (Mamba's correction for the chunk's start state), an estimate.
    """

    norms_per_block: int
    activations: Callable[[ModelInfo, int], tuple[float, float]]
    tp_all_reduces: Callable[[ModelInfo], tuple[tuple[int, int], ...]]
    cp_passes: int = 0
    cp_message: Callable[[ModelInfo], tuple[float, float]] = lambda info: (0.0, 0.0)
    activation_constant: Callable[[ModelInfo], float] = _no_elements
    kernel: str = ""
    kernel_flops: Callable[[ModelInfo, int], float] = lambda info, seq_len: 0.0
    causal: bool = False
    cp_kernel_flops: Callable[[ModelInfo], float] = _no_elements


@dataclass(frozen=True)
class TensorParallel:
    """How a family splits over ``tp`` ranks (what tp must divide is the card's ``tp_divides``):
    ``plan`` maps module name patterns inside a block to ``"colwise"`` / ``"rowwise"`` (torch's
    ``parallelize_module`` styles), or ``apply`` shards a block itself (``reason`` then says why
    a plan of stock styles does not do)."""

    plan: Mapping[str, str] | None = None
    reason: str = ""
    #: modules inside a block whose input is made replicated across tp ranks once (so the
    #: backward all-reduce of its gradient is one call, not one per column-wise projection)
    inputs: tuple[str, ...] = ()
    #: for a family whose split is not a plan of projections: ``apply(block, tp_mesh, ops)``
    #: shards one block in place; ``ops`` are the recorded copy/reduce collectives (`TpOps`)
    apply: Callable[..., None] | None = None


@dataclass(frozen=True)
class FamilyParts:
    """The torch side of a family, reached through its card (`ModelCard.parts`).

    ``build(size, vocab_size=..., kernel=...)`` constructs a randomly initialised model on the
    current default device (the caller seeds the RNG) with the resolved kernel backend
    ``kernel``; ``blocks(model)`` lists its repeated blocks; ``tensor_parallel`` says how tp
    splits a block; ``pipeline_stage(model, lo, hi, embed=None, head=None)`` is blocks ``[lo,
    hi)`` as one stage taking ``(token ids or hidden, position_ids)`` (one that ends in the head
    returns logits, others ``(hidden, position_ids)``); ``context_parallel(model, group, comm,
    dim, layout=...)`` switches a model or stage to its context-parallel forward (None: the
    family has none); ``torch_context_parallel(model, mesh)`` to PyTorch's (CUDA SDPA, causal
    rows without a mask; None: the family has none); ``fuse(model, device)`` applies the field's
    fused kernels in place and returns them by role (None: none).
    """

    build: Callable[..., Any]
    blocks: Callable[[Any], list[Any]]
    tensor_parallel: TensorParallel
    pipeline_stage: Callable[..., Any] | None = None
    context_parallel: Callable[..., Any] | None = None
    torch_context_parallel: Callable[..., Any] | None = None
    fuse: Callable[[Any, str], dict[str, str]] | None = None


@dataclass(frozen=True, slots=True)
class CPForm:
    """The context-parallel form a run takes (`ModelCard.cp_form`): ``kind`` ``"own"`` (the
    family's, `FamilyParts.context_parallel`) or ``"torch"`` (PyTorch's ``context_parallel``),
    the ``layout`` its ranks' chunks are cut in (`greenbench.distributed.context_parallel.
    CP_LAYOUTS`), and ``note``, what and why, stored with the run among its kernels (role
    ``context_parallel``)."""

    kind: str
    layout: str
    note: str


def _no_kernel_choice(setting: str) -> None:
    return None


@dataclass(frozen=True, eq=False)
class ModelCard:
    """One model family as far as no torch is needed (see the module docstring).

    ``describe(size, vocab_size)`` gives a preset's `ModelInfo` (`info` caches it);
    ``flops(info, seq_len)`` its analytic training FLOPs per token (PaLM's convention: full
    attention); ``attention(info, seq_len)`` the part of them a causal mask discounts,
    attention's scores and weighted sum over all ``seq_len`` keys (none for a family without
    attention, whose count is the same under either convention: `greenbench.vocabulary.flops`);
    ``tp_divides(info)`` names what a tensor-parallel degree must divide and gives its sizes.
    ``context_parallel`` says whether the family has a context-parallel form, ``cp_name`` what it
    is (for the run's note), ``cp_layout`` how it cuts a row over the cp ranks (``zigzag`` for
    attention, load-balanced under a causal mask; ``contiguous`` for a scan, which carries its
    state in order), ``torch_cp`` whether PyTorch's SDPA ``context_parallel`` can take its place
    on CUDA (`cp_form` chooses), ``tp_with_cp`` whether it composes with its tensor-parallel
    split. ``kernel_choices`` are the
    ``model.scan`` values it accepts besides ``auto`` (none: it has no choice and resolves to
    ``"none"``); ``check_kernel`` refuses a setting it does not accept; ``kernels_module``
    resolves one on a device.
    ``compiled_by_default``: its blocks are compiled under ``train.compile: auto`` on CUDA;
    ``fused_kernels``: it has the field's fused kernels (``model.liger``).
    """

    name: str
    presets: Mapping[str, Any]
    describe: Callable[..., ModelInfo]
    flops: Callable[[ModelInfo, int], float]
    tp_divides: Callable[[ModelInfo], dict[str, int]]
    planner: PlannerTerms
    parts_module: str
    context_parallel: bool = False
    cp_name: str = ""
    cp_layout: str = "contiguous"
    torch_cp: bool = False
    tp_with_cp: bool = True
    kernel_choices: tuple[str, ...] = ()
    check_kernel: Callable[[str], None] = _no_kernel_choice
    kernels_module: str | None = None
    fixed_kernels: Mapping[str, str] = field(default_factory=dict)
    compiled_by_default: bool = False
    fused_kernels: bool = False
    attention: Callable[[ModelInfo, int], float] = _no_attention

    # -- torch-free ----------------------------------------------------------------------------

    def info(self, size: str, *, vocab_size: int | None = None) -> ModelInfo:
        """`ModelInfo` of preset ``size`` (``vocab_size`` overrides the preset's vocabulary)."""
        return _info(self, size, vocab_size)

    def flops_per_token(self, info: ModelInfo, seq_len: int) -> float:
        """Analytic training FLOPs per token of ``info``'s model at ``seq_len`` (PaLM's
        convention: full attention)."""
        return self.flops(info, seq_len)

    def attention_flops_per_token(self, info: ModelInfo, seq_len: int) -> float:
        """The part of `flops_per_token` a causal mask discounts (0 without attention)."""
        return self.attention(info, seq_len)

    def preset(self, size: str) -> ModelPreset:
        """Preset ``size`` as the planner reads it (cached)."""
        return _preset(self, size)

    def layout_fits(self, size: str, tp: int, pp: int, cp: int, seq_len: int) -> str | None:
        """Why degrees (tp, pp, cp) cannot split preset ``size`` at ``seq_len``, or None."""
        return layout_fits(self.preset(size), tp, pp, cp, seq_len)

    def cp_form(self, device: str, packed: bool) -> CPForm:
        """The context-parallel form a run on ``device`` ("cpu" or "cuda") takes, ``packed``
        when its rows may hold several documents (any ``data.lengths`` but ``fixed``).

        PyTorch's ``context_parallel`` where the family allows it (``torch_cp``), on CUDA, for
        rows of one document: it replaces CUDA SDPA kernels only and load-balances only under
        ``is_causal`` with no mask, so a packed row's document mask rules it out. The family's
        own form otherwise."""
        own = f"cp: {self.cp_name} ({self.cp_layout})"
        if not self.torch_cp:
            return CPForm("own", self.cp_layout, own)
        if device != "cuda":
            why = "on CPU: context_parallel replaces CUDA SDPA kernels only"
        elif packed:
            why = "packed rows: context_parallel needs is_causal without a mask"
        else:
            note = "cp: torch context_parallel (SDPA, causal, head-tail = zigzag)"
            return CPForm("torch", "zigzag", note)
        return CPForm("own", self.cp_layout, f"{own}: {why}")

    def resolve_kernel(self, setting: str, device: str, *, build: bool = True) -> str:
        """The backend the family's kernel setting (``auto`` or a choice) runs on ``device``
        ("cpu" or "cuda"): ``"none"`` for a family without a choice; raises SpecError for a
        setting it does not accept and KernelUnavailable for one this machine cannot run (the
        probe imports the family's kernels module, and with it what they need). ``build``
        False builds no kernel (a preview): one of the family's own is taken to build where it
        could be built (the module's ``resolve_scan`` says how it judges that)."""
        if not self.kernel_choices or self.kernels_module is None:
            return "none"
        self.check_kernel(setting)
        module = importlib.import_module(self.kernels_module)
        if build:
            return module.resolve_scan(setting, device)
        return module.resolve_scan(setting, device, build=False)

    def kernels_used(self, kernel: str) -> dict[str, str]:
        """Every kernel a run with the resolved ``kernel`` uses, by role."""
        used = dict(self.fixed_kernels)
        if self.kernel_choices:
            used["scan"] = kernel
        return used

    # -- the torch side, imported when first asked for -----------------------------------------

    @property
    def parts(self) -> FamilyParts:
        """The family's `FamilyParts` (imports its parts module, and torch, on first use)."""
        return _parts(self.parts_module)

    @property
    def build(self) -> Callable[..., Any]:
        return self.parts.build

    @property
    def blocks(self) -> Callable[[Any], list[Any]]:
        return self.parts.blocks

    @property
    def tensor_parallel(self) -> TensorParallel:
        return self.parts.tensor_parallel

    @property
    def pipeline_stage(self) -> Callable[..., Any] | None:
        return self.parts.pipeline_stage

    @property
    def fuse(self) -> Callable[[Any, str], dict[str, str]] | None:
        return self.parts.fuse

    def enable_context_parallel(
        self,
        model: Any,
        group: Any,
        comm: Any,
        dim: str = "cp",
        *,
        form: CPForm | None = None,
        mesh: Any = None,
    ) -> Any:
        """Switch ``model`` (a whole model or a pipeline stage) to a context-parallel forward
        over ``group`` (in place), recording messages on ``dim`` in ``comm``: ``form`` (`cp_form`;
        the family's own in its layout when None) — PyTorch's needs the cp ``mesh`` (a
        ``DeviceMesh``). The caller feeds each rank its chunk in the form's layout
        (`greenbench.distributed.context_parallel.split_sequence`)."""
        form = form or CPForm("own", self.cp_layout, "")
        if form.kind == "torch":
            enable = self.parts.torch_context_parallel
            if enable is None or mesh is None:
                raise ValueError(f"no torch context_parallel for {self.name!r} (or no cp mesh)")
            return enable(model, mesh)
        own = self.parts.context_parallel
        if own is None:
            raise ValueError(f"no context-parallel form for model family {self.name!r}")
        return own(model, group, comm, dim, layout=form.layout)


@functools.cache
def _parts(module: str) -> FamilyParts:
    return importlib.import_module(module).PARTS


@functools.cache
def _info(card: ModelCard, size: str, vocab_size: int | None) -> ModelInfo:
    return card.describe(size, vocab_size=vocab_size)


class ModelPreset:
    """One preset of a card as the planner reads it: its `ModelInfo`'s numbers as plain
    attributes (the planner prices tens of thousands of layouts), what tp must divide, and the
    card's terms. A plain slotted class, not a dataclass: the planner's import time counts, and
    generating a dataclass of this many fields costs more than all the cards' presets."""

    __slots__ = (
        "card",
        "chunk_size",
        "context_parallel",
        "cp_message",
        "d_ffn",
        "d_inner",
        "d_model",
        "d_state",
        "dt_rank",
        "family",
        "head_params",
        "info",
        "kv_dim",
        "n_groups",
        "n_heads",
        "n_kv_heads",
        "n_layers",
        "n_params",
        "n_params_embedding",
        "size",
        "tp_all_reduces",
        "tp_divides",
        "vocab_size",
    )

    def __init__(self, card: ModelCard, info: ModelInfo) -> None:
        self.card, self.info = card, info
        self.family, self.size = info.family, info.size
        self.n_params, self.n_params_embedding = info.n_params, info.n_params_embedding
        self.n_layers, self.d_model, self.vocab_size = info.n_layers, info.d_model, info.vocab_size
        self.n_heads, self.n_kv_heads, self.d_ffn = info.n_heads, info.n_kv_heads, info.d_ffn
        self.d_inner, self.d_state = info.d_inner, info.d_state
        self.n_groups, self.chunk_size = info.n_groups, info.chunk_size
        self.dt_rank = info.dt_rank or 0
        self.kv_dim = info.kv_dim
        self.head_params = info.vocab_size * info.d_model + info.d_model  # final norm, LM head
        self.tp_divides: dict[str, int] = card.tp_divides(info)
        self.context_parallel = card.context_parallel
        self.tp_all_reduces = card.planner.tp_all_reduces(info)
        self.cp_message = card.planner.cp_message(info)

    def __repr__(self) -> str:
        return f"ModelPreset({self.family}/{self.size})"

    @property
    def planner(self) -> PlannerTerms:
        return self.card.planner

    def flops_per_token(self, seq_len: int) -> float:
        """Analytic training FLOPs per token at ``seq_len`` (`greenbench.models.flops`)."""
        return self.card.flops(self.info, seq_len)

    def params_per_layer(self) -> float:
        """Parameters of one repeated block (everything but embedding, final norm and head)."""
        return (self.n_params - self.n_params_embedding - self.head_params) / self.n_layers

    def norm_params_per_layer(self) -> int:
        """Parameters of a block's RMSNorms: the part of a block tensor parallelism leaves whole
        on every rank."""
        return self.card.planner.norms_per_block * self.d_model


@functools.cache
def _preset(card: ModelCard, size: str) -> ModelPreset:
    return ModelPreset(card, card.info(size))


def layout_fits(preset: ModelPreset, tp: int, pp: int, cp: int, seq_len: int) -> str | None:
    """Why degrees (tp, pp, cp) cannot split ``preset`` at ``seq_len``, or None when they can.

    The one rule of which layouts fit a model, applied by the spec, the planner and the hybrid
    strategy: tp divides what the family's split divides (attention heads, Mamba's inner
    channels, Mamba-2's groups), pp is at most the layers, cp divides the sequence, and cp > 1
    needs a family with a context-parallel form that composes with its tp split when both are
    used.
    """
    if tp > 1:
        for what, n in preset.tp_divides.items():
            if n % tp:
                return (
                    f"layout.tp={tp} does not divide the {n} {what} of "
                    f"{preset.family}/{preset.size} (each tensor-parallel rank holds whole {what})"
                )
    if pp > preset.n_layers:
        return (
            f"layout.pp={pp} is more than the {preset.n_layers} layers of "
            f"{preset.family}/{preset.size} (each pipeline stage needs at least one layer)"
        )
    if seq_len % cp:
        return (
            f"layout.cp={cp} does not divide data.seq_len={seq_len} "
            "(each context-parallel rank holds an equal slice of the sequence)"
        )
    if cp > 1 and not preset.context_parallel:
        from greenbench.models import FAMILIES

        having = sorted(name for name, card in FAMILIES.items() if card.context_parallel)
        return (
            f"strategy=hybrid has no context parallelism for {preset.family} "
            f"(layout.cp={cp}); families with one: {', '.join(having)}"
        )
    if cp > 1 and tp > 1 and not preset.card.tp_with_cp:
        return (
            f"strategy=hybrid cannot combine layout.tp and layout.cp for {preset.family} "
            "(both replace the mixer's forward); use one of them"
        )
    return None


def unknown_family(name: str, known: Mapping[str, ModelCard]) -> SpecError:
    """The refusal of an unknown family name, naming the choices."""
    return SpecError(f"unknown model family {name!r}; choose one of: {', '.join(sorted(known))}")
