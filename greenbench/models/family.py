"""The contract every model family keeps, and what a strategy receives to build a model.

A family (``transformer``, ``mamba``, ``mamba2``) is one package whose `ModelFamily` bundles:
size presets (like torchtitan's flavours); a builder; `ModelInfo`, an analytic description of a
preset (parameter counts and the shapes the FLOP formulas need, so the planner, the dashboard and
MFU use it without building a model); FLOPs per token; ``blocks(model)``, the repeated blocks
FSDP wraps one by one and a pipeline cuts between; what a tensor-parallel split divides
(attention heads, inner channels) and how (a plan of projections, or its own function);
``pipeline_stage``, a run of blocks as one pipeline stage; and its kernel backends, the
choices of the setting that picks one (``model.scan`` for Mamba and Mamba-2), resolved before a
run starts so the kernel that ran is part of the run's identity.

Adding a family is one new package and one line in `greenbench.models.FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


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


@dataclass(frozen=True, slots=True)
class TensorParallel:
    """How a family splits over ``tp`` ranks: ``divides`` names what tp must divide and gives
    its sizes in a preset (e.g. attention heads and KV heads); ``plan`` maps module name
    patterns inside a block to ``"colwise"`` / ``"rowwise"`` (torch's ``parallelize_module``
    styles), or ``apply`` shards a block itself (``reason`` then says why a plan of stock
    styles does not do)."""

    divides: Callable[[ModelInfo], dict[str, int]]
    plan: Mapping[str, str] | None = None
    reason: str = ""
    #: modules inside a block whose input is made replicated across tp ranks once (so the
    #: backward all-reduce of its gradient is one call, not one per column-wise projection)
    inputs: tuple[str, ...] = ()
    #: for a family whose split is not a plan of projections: ``apply(block, tp_mesh, ops)``
    #: shards one block in place; ``ops`` are the recorded copy/reduce collectives (`TpOps`)
    apply: Callable[..., None] | None = None


@dataclass(frozen=True, slots=True)
class ModelFamily:
    """One model family (see the module docstring for the contract).

    ``build(size, vocab_size=..., kernel=...)`` constructs a randomly initialised model on the
    current default device (the caller seeds the RNG), with the kernel backend ``kernel`` (a
    resolved choice); ``info(size, vocab_size=...)`` returns its `ModelInfo`.
    ``resolve_kernel(setting, device)`` turns the family's kernel setting (``auto`` or a
    choice) into the backend that will run on ``device`` ("cpu" or "cuda"), or raises
    `KernelUnavailable`; families without a choice resolve to ``"none"``. ``kernels_used``
    names every kernel a run of the family uses, for its record.
    """

    name: str
    presets: Mapping[str, Any]
    build: Callable[..., torch.nn.Module]
    info: Callable[..., ModelInfo]
    flops_per_token: Callable[[ModelInfo, int], float]
    blocks: Callable[[torch.nn.Module], list[torch.nn.Module]]
    tensor_parallel: TensorParallel
    #: ``pipeline_stage(model, lo, hi, embed=None, head=None)``: blocks ``[lo, hi)`` as one
    #: stage module taking ``(token ids or hidden, position_ids)``; one that ends in the head
    #: returns logits, others ``(hidden, position_ids)``
    pipeline_stage: Callable[..., torch.nn.Module] | None = None
    kernel_choices: tuple[str, ...] = ()
    resolve_kernel: Callable[[str, str], str] = lambda setting, device: "none"
    fixed_kernels: Mapping[str, str] = field(default_factory=dict)
    #: ``fuse(model, device)``: the field's fused-kernel library applied to a built model in
    #: place (liger-kernel for the Transformer, ``model.liger``); returns the kernels by role.
    #: A model whose loss it fuses is marked with `FUSED_LOSS_ATTR`.
    fuse: Callable[[torch.nn.Module, str], dict[str, str]] | None = None

    def kernels_used(self, kernel: str) -> dict[str, str]:
        """Every kernel a run with the resolved ``kernel`` uses, by role."""
        used = dict(self.fixed_kernels)
        if self.kernel_choices:
            used["scan"] = kernel
        return used


@dataclass(frozen=True, slots=True)
class ModelBuilder:
    """What a strategy receives: everything needed to build this run's model, and its blocks.

    ``build(device)`` seeds torch's RNG with ``seed`` and constructs the model (``"meta"``
    builds shapes only), so every rank and the single-process reference get the same weights.
    With ``fused``, the family's fused kernels are applied (``fuse``); with ``compile``, each
    block's forward is compiled (`compile_blocks`); both as the model is built, before any
    strategy wraps, shards or splits it.
    """

    family: ModelFamily
    size: str
    seed: int
    kernel: str = "none"
    vocab_size: int | None = None
    compile: bool = False
    fused: bool = False

    @property
    def info(self) -> ModelInfo:
        return self.family.info(self.size, vocab_size=self.vocab_size)

    def build(self, device: str | torch.device | None = None) -> torch.nn.Module:
        torch.manual_seed(self.seed)
        if device is None:
            model = self.family.build(self.size, vocab_size=self.vocab_size, kernel=self.kernel)
        else:
            with torch.device(device):
                model = self.family.build(self.size, vocab_size=self.vocab_size, kernel=self.kernel)
        if self.fused:
            if self.family.fuse is None:
                raise ValueError(f"model family {self.family.name!r} has no fused kernels")
            self.family.fuse(model, torch.device(device or "cpu").type)
        if self.compile:
            compile_blocks(self.family.blocks(model))
        return model

    def blocks(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        return self.family.blocks(model)


#: set on a model whose forward, given ``labels`` and ``num_items_in_batch=1``, returns the
#: summed next-token loss itself (computed fused with the LM head, logits never materialised)
FUSED_LOSS_ATTR = "greenbench_fused_loss"


def fuses_loss(model: torch.nn.Module) -> bool:
    """Whether ``model`` (or the module a DDP wrapper holds) computes its loss in its forward."""
    return bool(getattr(getattr(model, "module", model), FUSED_LOSS_ATTR, False))


def compile_blocks(blocks: list[torch.nn.Module]) -> None:
    """Compile each block's ``forward`` with `torch.compile`, in place, as torchtitan compiles
    each transformer block: the module stays itself (same parameters, same class), so FSDP2's
    hooks, DDP's wrapper and a tensor-parallel plan apply to it as to an eager block and run
    eagerly around the compiled forward. Compilation happens at the first call."""
    for block in blocks:
        block.forward = torch.compile(block.forward)  # type: ignore[method-assign]
