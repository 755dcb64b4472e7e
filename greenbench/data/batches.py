"""The tensors a rank trains on: one optimizer step's microbatches of packed documents.

``make_step_batches`` is the whole data path of a step: draw the global minibatch's document
lengths, plan ranks and microbatches (``packing``), sample each document from the Markov
source, and lay documents end to end in rows.

Layout of a microbatch (B rows, T = the longest row's tokens, B ≤ micro_batch, T ≤ seq_len):
documents are concatenated in a row; ``position_ids`` restart at 0 at every document;
``labels`` equal ``input_ids`` (Hugging Face convention: the loss compares logits at t with
labels at t + 1) except −100 on padding and on each document's first token, which would
otherwise be predicted from the previous document. Padding sits at the end of a row (token 0,
position 0), so under causal attention no real token sees it. The Transformer masks attention
between the documents of a row (transformers builds a document-causal mask from the restarting
``position_ids``; context parallelism's ring applies the same mask), while Mamba's scan runs
through the whole row; the FLOPs counted are those of the packed row either way, and a Markov
source's tokens do not depend on anything before their predecessor, so the loss floor (the
chain's entropy rate) is unchanged. ``doc_lengths`` gives each row's documents (the
``cu_seqlens`` a variable-length GPU kernel would need).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from greenbench.data.lengths import draw_lengths
from greenbench.data.markov import MarkovSource
from greenbench.data.packing import ASSIGN_MODES, assign_to_ranks, get_cost_model
from greenbench.errors import SpecError

IGNORE_INDEX = -100
#: the third word of the held-out set's seed (training steps' seeds have two: run seed, step),
#: so validation documents come from a stream no training step draws from
HELD_OUT_STREAM = 0x4E1D0E7
PAD_TOKEN_ID = 0


@dataclass(frozen=True, slots=True)
class Microbatch:
    """One forward/backward's worth of packed rows."""

    input_ids: torch.Tensor  # (B, T) int64
    labels: torch.Tensor  # (B, T) int64, −100 on padding and on each document's first token
    position_ids: torch.Tensor  # (B, T) int64, 0 at each document start (and on padding)
    n_tokens: int  # real label tokens = (labels != −100).sum()
    n_sequences: int  # documents in this microbatch
    doc_lengths: tuple[tuple[int, ...], ...] = ()  # per row, the packed documents' lengths


@dataclass(frozen=True, slots=True)
class StepBatch:
    """What one rank trains on in one optimizer step."""

    microbatches: tuple[Microbatch, ...]
    global_tokens: int  # real label tokens of the whole minibatch over ALL ranks
    cost: float  # this rank's summed document cost under the cost model
    microbatch_costs: tuple[float, ...] = ()  # per microbatch, same units as cost
    n_truncated: int = 0  # documents of the whole minibatch cut to seq_len

    @property
    def n_tokens(self) -> int:
        """Real label tokens on this rank."""
        return sum(mb.n_tokens for mb in self.microbatches)


def collate_microbatch(rows: Sequence[Sequence[torch.Tensor]]) -> Microbatch:
    """Lay documents (1-D LongTensors, ≥ 1 token each) end to end: rows[r] fills row r."""
    if not rows or any(not row for row in rows):
        raise ValueError("a microbatch needs at least one row, each with at least one document")
    row_lens = [sum(len(d) for d in row) for row in rows]
    b, t = len(rows), max(row_lens)
    input_ids = torch.full((b, t), PAD_TOKEN_ID, dtype=torch.long)
    labels = torch.full((b, t), IGNORE_INDEX, dtype=torch.long)
    position_ids = torch.zeros((b, t), dtype=torch.long)
    n_tokens = 0
    for r, row in enumerate(rows):
        at = 0
        for doc in row:
            n = len(doc)
            input_ids[r, at : at + n] = doc
            labels[r, at + 1 : at + n] = doc[1:]
            position_ids[r, at : at + n] = torch.arange(n)
            n_tokens += n - 1
            at += n
    return Microbatch(
        input_ids=input_ids,
        labels=labels,
        position_ids=position_ids,
        n_tokens=n_tokens,
        n_sequences=sum(len(row) for row in rows),
        doc_lengths=tuple(tuple(len(d) for d in row) for row in rows),
    )


def make_step_batches(
    step: int,
    *,
    source: MarkovSource,
    lengths: str,
    seq_len: int,
    global_batch: int,
    micro_batch: int,
    world_size: int,
    mode: str,
    cost_model: str,
    scale: float,
    seed: int,
    cost_fit: tuple[float, float] | None = None,
    held_out: bool = False,
) -> list[StepBatch]:
    """One StepBatch per rank (index = rank) for optimizer step ``step``.

    Args:
        step: optimizer step number (≥ 0); with ``seed`` it fixes the documents.
        source: the token source; documents are independent stationary sequences from it.
        lengths: a LENGTH_DISTRIBUTIONS name.
        seq_len: row capacity in tokens; documents longer than this are truncated to it.
        global_batch: documents per optimizer step over all ranks.
        micro_batch: at most this many rows per microbatch.
        world_size: data-parallel ranks.
        mode: "same-count" (equal microbatch counts, cost-balanced ranks), "sampler" (equal
            counts, DistributedSampler's unbalanced split) or "balanced-cost" (ODC).
        cost_model: a COST_MODELS name, evaluated on the full-size length each document
            stands for (tokens / scale for post-training distributions), so that the plan is
            the one the ODC packer would make for the data being imitated.
            ``measured`` (with ``cost_fit``'s ``(a, b)``) is evaluated on the trained tokens.
        scale: length scale for absolute (post-training) distributions, e.g. 1/32.
        seed: run seed.
        cost_fit: ``(a, b)`` of ``cost_model = measured`` (`greenbench.data.cost_fit`).
        held_out: draw from the held-out stream (`HELD_OUT_STREAM`): documents from the same
            chain and length distribution that no training step draws.

    The documents (lengths and tokens) depend only on (seed, step, lengths, seq_len,
    global_batch, scale, source): the same set for every world_size and mode, split
    differently. With lengths="fixed" and global_batch divisible by world_size·micro_batch,
    every microbatch is a full (micro_batch, seq_len) block.
    """
    if step < 0 or seed < 0:
        raise SpecError(f"step and seed must be >= 0, got step={step}, seed={seed}")
    if micro_batch < 1 or world_size < 1 or global_batch < 1:
        raise SpecError("global_batch, micro_batch and world_size must be >= 1")
    if mode not in ASSIGN_MODES:
        raise SpecError(f"unknown balance mode {mode!r}; choose one of {', '.join(ASSIGN_MODES)}")
    model = get_cost_model(cost_model, cost_fit)
    entropy = [seed, step, HELD_OUT_STREAM] if held_out else [seed, step]
    len_seq, tok_seq = np.random.SeedSequence(entropy).spawn(2)
    sample = draw_lengths(
        lengths, global_batch, np.random.default_rng(len_seq), seq_len=seq_len, scale=scale
    )
    priced = sample.lengths if model.trained else sample.represented_tokens
    costs = np.asarray(model(priced), dtype=np.float64)
    plans = assign_to_ranks(
        sample.lengths,
        world_size,
        mode,
        costs=costs,
        capacity=seq_len,
        rows_per_microbatch=micro_batch,
    )
    generator = torch.Generator().manual_seed(int(tok_seq.generate_state(1)[0]))
    docs = source.sample_documents(sample.lengths, generator)
    global_tokens = int((sample.lengths - 1).sum())
    out = []
    for plan in plans:
        mbs = tuple(
            collate_microbatch([[docs[d] for d in row] for row in mb]) for mb in plan.microbatches
        )
        out.append(
            StepBatch(
                microbatches=mbs,
                global_tokens=global_tokens,
                cost=plan.cost,
                microbatch_costs=plan.microbatch_costs,
                n_truncated=sample.n_truncated,
            )
        )
    return out
