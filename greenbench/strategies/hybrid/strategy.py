"""The hybrid strategy: data, tensor, pipeline and context parallelism composed over one mesh.

`Hybrid.apply` is the one place a layout is applied, in torchtitan's order:

1. **PP** — this rank keeps its pipeline stage, a run of the family's blocks, or two under
   interleaved 1F1B (`greenbench.strategies.hybrid.pp`, torch's ``pipelining`` schedules);
   each stage is then split and sharded on its own, as torchtitan does its model parts;
2. **TP** — the stage's blocks are split over ``tp`` (`greenbench.strategies.hybrid.tp`);
3. **CP** — the sequence is split over ``cp`` in the form the family's card chooses
   (`ModelCard.cp_form`, applied by `ModelCard.enable_context_parallel`): for the Transformer
   PyTorch's SDPA ``context_parallel`` on CUDA with rows of one document, our ring attention
   otherwise (packed rows, CPU), both on load-balanced zigzag chunks; the scan's state passed
   between contiguous chunks for Mamba (`greenbench.distributed.context_parallel`); a family
   without one, Mamba-2, is refused by its settings check (`greenbench.strategies.hybrid.
   checks`, through the card's `layout_fits`);
4. activation checkpointing and compile: applied as the model is built, per block, when
   ``train.activation_checkpointing`` / ``train.compile`` ask (`greenbench.models.builder`);
5. **FSDP** — FSDP2 over the data-parallel shards and the context-parallel ranks together
   (``dp_shard × cp`` flattened, as torchtitan does: context-parallel ranks hold the same
   parameters and each computes part of their gradient, so they reduce with the data-parallel
   ranks);
6. **HSDP** — with ``dp_replicate`` > 1, each replica holds the same shards: FSDP2 runs over
   the shard dimension alone, and its all-reduce hook sums every reduce-scattered gradient
   shard over ``dp_replicate`` (`greenbench.strategies.fsdp.replicate_hook`), where the
   all-reduce is issued and recorded. FSDP2's own HSDP (a 2-D mesh) issues that all-reduce
   where nothing can record it: its hook only sees the result. As FSDP2's own HSDP does by
   default, the all-reduce follows each reduce-scatter (every microbatch without a pipeline,
   once per step with one).

Data: every rank of one data-parallel index trains the same part of the minibatch
(`DataParallel.assignment`); only the rank at the origin of the tp, pp and cp dimensions counts its
tokens, FLOPs and loss, so each token counts once. Labels are shifted over the whole row before
the sequence is split (a chunk's last position predicts the next chunk's first token), so every
path computes cross-entropy without a further shift: the step schedule (`HybridSchedule`)
computes a model family's next-token loss on this rank's share of each microbatch itself (the
workloads this strategy runs are built-in ones).

Evaluation on the held-out set (`HybridSchedule.evaluate`) runs the same split forward only:
the pipeline through its schedule's ``eval``, the loss made whole over cp and pp as in training,
and each data-parallel part's loss added once, from the rank that counts its tokens.

Replication needs something sharded to replicate (``dp_shard × cp`` > 1): replicas alone are the
``ddp`` strategy, and replicas beside tensor or pipeline parallelism alone are refused by the
settings check. Gradients are summed by every collective (reduce-scatter and all-reduce alike)
and the loss is divided by the minibatch's global token count, so HSDP equals one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F

from greenbench.distributed.comm import CommRecorder, tensor_bytes
from greenbench.distributed.context_parallel import granule, take_chunk
from greenbench.distributed.device import DistContext
from greenbench.errors import SpecError
from greenbench.sources.builtin import forward_logits
from greenbench.strategies.base import DataParallel
from greenbench.strategies.fsdp import reshard, shard_model
from greenbench.strategies.hybrid.pp import Pipeline, rank_stages, stage_bounds, virtual_stages
from greenbench.strategies.hybrid.tp import apply_tensor_parallel
from greenbench.strategies.schedule import BeforeMicrobatch, StepSchedule

if TYPE_CHECKING:
    from greenbench.config import Config
    from greenbench.data import Microbatch, StepBatch
    from greenbench.models import ModelBuilder
    from greenbench.sources.contract import Loss

IGNORE = -100


class Hybrid(DataParallel):
    name = "hybrid"
    pipeline: Pipeline | None = None
    pp_schedule = "1f1b"
    seq_len = micro_batch = global_batch = 0
    packed = True  # rows may hold several documents (any data.lengths but fixed)
    cp_layout = "contiguous"  # how rows are cut over cp: the CP form's (parallelize)

    def configure(self, config: Config) -> None:
        self.pp_schedule = config.train.pp_schedule
        self.seq_len = config.data.seq_len
        self.micro_batch = config.data.micro_batch
        self.global_batch = config.data.global_batch
        self.packed = config.data.lengths != "fixed"

    def coordinate(self, dim: str) -> int:
        """This rank's index along mesh dimension ``dim`` (0 when the layout lacks it)."""
        if self.mesh is None or dim not in (self.mesh.mesh_dim_names or ()):
            return 0
        return self.mesh.get_local_rank(dim)

    @property
    def counts_tokens(self) -> bool:
        return all(self.coordinate(d) == 0 for d in ("tp", "pp", "cp"))

    @property
    def state_key(self) -> str:
        """A pipeline stage's model is its own (its ranks along the other dimensions share it)."""
        return f"stage{self.coordinate('pp')}" if self.layout.pp > 1 else "model"

    def parallelize(self, model: ModelBuilder) -> torch.nn.Module:  # type: ignore[override]
        """Split a model family's preset (a built-in model source: its family has the
        stages, tensor-parallel plan and context-parallel form)."""
        builder = model
        layout, mesh, family = self.layout, self.mesh, builder.family
        built = builder.build(self.ctx.device)
        parts = [(built, builder.blocks(built))]  # (module, its blocks) per stage this rank holds
        if layout.pp > 1:
            if family.pipeline_stage is None:
                raise SpecError(f"{family.name} has no pipeline stages")
            blocks = builder.blocks(built)
            total = layout.pp * virtual_stages(self.pp_schedule)
            parts = []
            for at in rank_stages(self.coordinate("pp"), layout.pp, self.pp_schedule):
                lo, hi = stage_bounds(len(blocks), total, at)
                parts.append((family.pipeline_stage(built, lo, hi), blocks[lo:hi]))
        for module, blocks in parts:
            if layout.tp > 1:
                apply_tensor_parallel(family, blocks, mesh["tp"], self.comm)
            if layout.cp > 1:
                form = family.cp_form(self.ctx.device.type, self.packed)
                self.cp_layout = form.layout
                family.enable_context_parallel(
                    module, mesh["cp"].get_group(), self.comm, form=form, mesh=mesh["cp"]
                )
        shard_dims = tuple(d for d in ("dp_shard", "cp") if getattr(layout, d) > 1)
        if shard_dims:
            if len(shard_dims) == 1:
                shard_mesh, dim = mesh[shard_dims[0]], shard_dims[0]
            else:
                dim = "_".join(shard_dims)
                shard_mesh = mesh[shard_dims]._flatten(dim)
            replicate = None
            if layout.dp_replicate > 1:
                replicate = (mesh.get_group("dp_replicate"), "dp_replicate")
            for module, blocks in parts:
                shard_model(module, blocks, shard_mesh, self.comm, dim, replicate=replicate)
        modules = [module for module, _ in parts]
        if layout.pp > 1:
            self.pipeline = Pipeline(
                modules,
                stage=self.coordinate("pp"),
                stages=layout.pp,
                device=self.ctx.device,
                group=mesh.get_group("pp"),
                n_microbatches=self.microbatch_count(),
                schedule=self.pp_schedule,
                comm=self.comm,
            )
        # several stages (interleaved): one module holding them, for the optimizer and state
        return modules[0] if len(modules) == 1 else torch.nn.ModuleList(modules)

    def microbatch_count(self) -> int:
        """Microbatches per data-parallel rank and step (what the pipeline is built for)."""
        return self.global_batch // self.layout.dp // self.micro_batch

    def schedule(self, loss: Loss) -> StepSchedule:
        return HybridSchedule(self.ctx, self.comm, loss, self)


class HybridSchedule(StepSchedule):
    """The hybrid step: this rank's share of each microbatch's sequence through the shared
    template, or the whole minibatch through the pipeline; the loss made whole over the
    context- and pipeline-parallel ranks. Every reduction sums, so the loss scale is
    1 / global tokens."""

    def __init__(self, ctx: DistContext, comm: CommRecorder, loss: Loss, hybrid: Hybrid) -> None:
        super().__init__(ctx, comm, loss)
        self.hybrid = hybrid
        self.layout = hybrid.layout

    # -- the data a rank computes on ---------------------------------------------------------

    def prepare(
        self, mb: Microbatch, pad_to: tuple[int, int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input ids, position ids, shifted labels) of this rank's part of ``mb``: labels
        shifted over whole rows, rows padded to ``pad_to`` (rows, tokens), and to a multiple of
        the CP layout's runs (``cp``, or ``2·cp`` zigzag), then this rank's chunk of the
        sequence in that layout (`take_chunk`)."""
        ids, pos = mb.input_ids, mb.position_ids
        labels = F.pad(mb.labels[:, 1:], (0, 1), value=IGNORE)
        rows, tokens = ids.shape
        cp, cp_layout = self.layout.cp, self.hybrid.cp_layout
        runs = granule(cp, cp_layout)
        want_rows, want_tokens = pad_to or (rows, tokens)
        want_tokens = -(-want_tokens // runs) * runs
        if (want_rows, want_tokens) != (rows, tokens):
            grow = (0, want_tokens - tokens, 0, want_rows - rows)
            ids, pos = F.pad(ids, grow, value=0), F.pad(pos, grow, value=0)
            labels = F.pad(labels, grow, value=IGNORE)
        if cp > 1:
            at = self.hybrid.coordinate("cp")
            ids, pos, labels = (take_chunk(t, at, cp, cp_layout) for t in (ids, pos, labels))
        device = self.ctx.device
        return ids.to(device), pos.to(device), labels.to(device)

    def microbatch_loss(self, model: torch.nn.Module, mb: Microbatch) -> torch.Tensor:
        ids, pos, labels = self.prepare(mb)
        with self.autocast():
            logits = forward_logits(model, ids, pos)
        return F.cross_entropy(
            logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE, reduction="sum"
        )

    def forward_backward(
        self,
        model: torch.nn.Module,
        batch: StepBatch,
        before_microbatch: BeforeMicrobatch | None = None,
    ) -> torch.Tensor:
        if self.hybrid.pipeline is None:
            loss = super().forward_backward(model, batch, before_microbatch)
        else:  # the pipeline runs the minibatch as one schedule: no hook per microbatch
            loss = self.pipelined(batch)
        return self.whole_loss(loss)

    def pipelined(self, batch: StepBatch) -> torch.Tensor:
        """The minibatch through the pipeline: microbatches padded to one shape, stacked."""
        count = self.hybrid.microbatch_count()
        if len(batch.microbatches) > count:
            raise RuntimeError(
                f"{len(batch.microbatches)} microbatches for a pipeline built for {count}"
            )
        ids, pos, labels = self.stacked(batch.microbatches)
        with self.autocast():
            return self.hybrid.pipeline.run(  # type: ignore[union-attr]
                ids, pos, labels, self.loss_scale(batch.global_tokens)
            )

    def stacked(
        self, microbatches: Sequence[Microbatch]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """At most the pipeline's microbatch count of microbatches, each padded to
        (micro_batch, seq_len), stacked along dim 0; all-padding microbatches (no tokens, no
        loss) fill the count up, since the schedule runs a fixed number."""
        count = self.hybrid.microbatch_count()
        shape = (self.hybrid.micro_batch, self.hybrid.seq_len)
        parts = [self.prepare(mb, shape) for mb in microbatches]
        while len(parts) < count:  # an all-padding microbatch: no tokens, no loss
            ids, pos, labels = parts[0]
            parts.append((ids.clone(), pos.clone(), torch.full_like(labels, IGNORE)))
        ids, pos, labels = (torch.cat(column) for column in zip(*parts, strict=True))
        return ids, pos, labels

    # -- evaluation --------------------------------------------------------------------------

    def evaluate(self, model: torch.nn.Module, batch: StepBatch) -> tuple[float, int]:
        """The held-out loss of the whole model: this rank's share of the sequence through its
        stage (tensor-parallel collectives, ring attention and FSDP2 gathers as in training),
        or the set through the pipeline's forward-only schedule in runs of its microbatch
        count; then made whole over cp and pp (`whole_loss`) and summed over the data-parallel
        parts, each counted by one rank (`reduce_eval`)."""
        with torch.no_grad():
            if self.hybrid.pipeline is None:
                loss = torch.zeros((), device=self.ctx.device, dtype=torch.float64)
                for mb in batch.microbatches:
                    loss += self.microbatch_loss(model, mb).double()
            else:
                loss = self.pipelined_eval(batch)
            loss = self.reduce_eval(self.whole_loss(loss))
        reshard(model)  # FSDP2's gathered root, kept for a backward that does not come
        return float(loss), batch.global_tokens

    def pipelined_eval(self, batch: StepBatch) -> torch.Tensor:
        """The set's share through the pipeline, forward only, in runs of the microbatch count
        it was built for (the last one padded); the summed loss on the last stage, 0 on the
        others. Every stage of one data-parallel part holds the same share, so they run the
        same number of schedules."""
        pipeline = self.hybrid.pipeline
        assert pipeline is not None
        count = self.hybrid.microbatch_count()
        loss = torch.zeros((), device=self.ctx.device, dtype=torch.float64)
        for at in range(0, len(batch.microbatches), count):
            ids, pos, labels = self.stacked(batch.microbatches[at : at + count])
            with self.autocast():
                loss += pipeline.evaluate(ids, pos, labels).double()
        return loss

    def reduce_eval(self, loss_sum: torch.Tensor) -> torch.Tensor:
        """The data-parallel parts' losses added over the world, each part's from the one rank
        that counts its tokens (`Hybrid.counts_tokens`): its tp, pp and cp ranks hold the same
        whole-part loss after `whole_loss`."""
        own = loss_sum if self.hybrid.counts_tokens else torch.zeros_like(loss_sum)
        return super().reduce_eval(own)

    def whole_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The data-parallel part's loss on every rank: summed over the sequence's chunks
        (cp) and taken from the last pipeline stage (pp)."""
        for dim in ("cp", "pp"):
            if getattr(self.layout, dim) > 1:
                total = loss.detach().clone().reshape(1)
                with self.comm.span(dim, "all_reduce", tensor_bytes(total)):
                    dist.all_reduce(total, group=self.hybrid.mesh.get_group(dim))  # type: ignore[union-attr]
                loss = total[0]
        return loss
