"""greenbench's own workloads in the workload contract (`greenbench.sources.contract`): a model
family's preset (`greenbench.models.ModelBuilder`) as the model source, the run's synthetic data
(`greenbench.data.DataPlan`) as the batch source, next-token cross-entropy as the loss
(`next_token_loss`) and the family's analytic FLOPs (`ModelFlops`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from greenbench.data import DataPlan
from greenbench.models.builder import ModelBuilder, fuses_loss
from greenbench.sources.contract import Autocast, TrainingWorkload

if TYPE_CHECKING:
    from greenbench.data import Microbatch, StepBatch
    from greenbench.models import ModelInfo


def builtin_workload(
    builder: ModelBuilder, plan: DataPlan, held_out_docs: int = 0
) -> TrainingWorkload:
    """A model family's preset trained on the run's synthetic data; with ``held_out_docs``
    documents held out for evaluation (`DataPlan.held_out`)."""
    return TrainingWorkload(
        model=builder,
        batches=plan,
        loss=next_token_loss,
        flops=ModelFlops(builder.info),
        held_out=plan.held_out(held_out_docs) if held_out_docs else None,
    )


def next_token_loss(
    model: torch.nn.Module, mb: Microbatch, device: torch.device, autocast: Autocast
) -> torch.Tensor:
    """Sum of next-token cross-entropies over the real tokens of one microbatch (the forward
    under ``autocast``, the cross-entropy in float32)."""
    input_ids = mb.input_ids.to(device, non_blocking=True)
    labels = mb.labels.to(device, non_blocking=True)
    position_ids = mb.position_ids.to(device, non_blocking=True)
    if fuses_loss(model):  # the forward computes the summed loss, fused with the LM head
        with autocast():
            return forward_fused_loss(model, input_ids, position_ids, labels)
    with autocast():
        logits = forward_logits(model, input_ids, position_ids)
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(),
        labels[:, 1:].flatten(),
        ignore_index=-100,
        reduction="sum",
    )


def forward_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor
) -> torch.Tensor:
    """Logits of a Hugging Face causal LM; position ids go only to models that take them
    (Llama does, so packed documents restart their positions; Mamba has none)."""
    if takes_position_ids(type(getattr(model, "module", model))):
        return model(input_ids=input_ids, position_ids=position_ids).logits
    return model(input_ids=input_ids).logits


def forward_fused_loss(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    labels: torch.Tensor,
) -> torch.Tensor:
    """The summed next-token loss of a model that computes it in its forward
    (`greenbench.models.builder.fuses_loss`): ``num_items_in_batch=1`` makes its reduction a
    sum, the quantity `next_token_loss` computes from logits."""
    extra = {"position_ids": position_ids}
    if not takes_position_ids(type(getattr(model, "module", model))):
        extra = {}
    return model(input_ids=input_ids, labels=labels, num_items_in_batch=1, **extra).loss


@functools.cache
def takes_position_ids(cls: type) -> bool:
    return "position_ids" in inspect.signature(cls.forward).parameters


def batch_flops(info: ModelInfo, batch: StepBatch) -> float:
    """Analytic model FLOPs of one optimizer step over this rank's microbatches, PaLM's
    convention: each real token at its microbatch's width (full attention)."""
    from greenbench.models.flops import flops_per_token

    return sum(
        mb.n_tokens * flops_per_token(info, mb.input_ids.shape[1]) for mb in batch.microbatches
    )


def batch_causal_flops(info: ModelInfo, batch: StepBatch) -> float | None:
    """The same step's FLOPs under the causal convention (`greenbench.models.causal`): each
    row's real tokens at its microbatch's width, attention scaled by the share of query–key
    pairs the row's documents keep. None where a microbatch does not say its documents."""
    from greenbench.models.causal import causal_flops_per_token

    total = 0.0
    for mb in batch.microbatches:
        if len(mb.doc_lengths) != mb.input_ids.shape[0]:
            return None
        width = mb.input_ids.shape[1]
        for docs in mb.doc_lengths:
            tokens = sum(n - 1 for n in docs)  # real label tokens: all but each first one
            total += tokens * causal_flops_per_token(info, width, docs)
    return total


@dataclass(frozen=True, slots=True)
class ModelFlops:
    """A greenbench model's analytic FLOPs (`batch_flops`, `batch_causal_flops`): known,
    never counted."""

    info: ModelInfo

    def of(self, batch: StepBatch) -> float:
        return batch_flops(self.info, batch)

    def causal_of(self, batch: StepBatch) -> float | None:
        return batch_causal_flops(self.info, batch)

    def counting(self, batch: StepBatch) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()
