"""tinylm's training step as a greenbench workload: ``greenbench run --workload
tinylm.bench:workload`` (or ``--workload tinylm`` once the package is installed: it registers
itself under the ``greenbench.workloads`` entry-point group)."""

from __future__ import annotations

from greenbench import Batch, Workload, WorkloadContext
from tinylm.data import token_batch
from tinylm.model import TinyConvLM, next_token_loss

SEQ_LEN = 128


def build(ctx: WorkloadContext) -> TinyConvLM:
    s = ctx.settings
    return TinyConvLM(vocab=s["vocab"], width=s["width"], depth=s["depth"])


def batch(ctx: WorkloadContext, step: int) -> Batch:
    s = ctx.settings
    tokens = token_batch(
        seed=ctx.seed, step=step, rank=ctx.rank, rows=s["rows"], seq_len=SEQ_LEN + 1,
        vocab=s["vocab"],
    )  # fmt: skip
    return Batch(data=tokens, tokens=tokens[:, 1:].numel())


workload = Workload(
    name="tinylm",
    question="How many joules does one token of tinylm's training step cost, and at what speed?",
    build_model=build,
    batch=batch,
    loss=next_token_loss,
    # FLOPs per token are left to greenbench to count (FlopCounterMode, labelled as counted)
    strategies=("single", "ddp", "fsdp"),
    settings={"width": 64, "depth": 2, "vocab": 256, "rows": 8},
    blocks=lambda model: list(model.blocks),
    seq_len=SEQ_LEN,
)
