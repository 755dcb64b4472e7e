"""Context parallelism (CP): a sequence split into chunks, one per rank of a group.

What every CP rank shares, whatever the model family:

* the layout of the chunks (`CP_LAYOUTS`, `chunk_pieces`, `chunk_index`): ``contiguous`` —
  rank r holds the r-th of ``cp`` equal runs of the row — or ``zigzag`` (load-balanced; PyTorch
  calls it head-tail) — the row is cut into ``2·cp`` equal runs and rank r holds runs r and
  ``2·cp − 1 − r``, one from the head and its mirror from the tail. Under a causal mask the
  contiguous split gives the last rank ``2·cp − 1`` times the first one's attention work; the
  zigzag split gives every rank the same (each holds early queries that see few keys and late
  ones that see many). A family's card says which layout its CP form takes
  (`greenbench.models.card.ModelCard.cp_layout`): zigzag for the Transformer's attention,
  contiguous for Mamba, whose scan carries its state from one chunk to the next in order.
* `split_sequence` — this rank's chunk of a microbatch. Labels are shifted over the WHOLE row
  before the row is cut (the Hugging Face convention scores the logits at t against the labels
  at t + 1), so a chunk's last token is scored against the next chunk's first label; the caller
  then takes the cross-entropy of the chunk's logits against the shifted labels as they are,
  without shifting again. The per-rank sums of token losses add up to the whole row's loss.
* `CPGroup` and `exchange` (`greenbench.distributed.cp_group`) — the process group of the
  ``cp`` mesh dimension with the `CommRecorder` every message is recorded in (dimension
  ``"cp"``), and point-to-point messages to neighbouring ranks issued together
  (``batch_isend_irecv``), waited for later, so a ring step's transfer can overlap compute.

Each family owns its CP form, reached through its card
(`greenbench.models.card.ModelCard.enable_context_parallel`), which switches a built model's
sequence mixing to it: ring attention for the Transformer
(`greenbench.models.transformer.context_parallel`), the scan's state and the conv's halo passed
between chunks for Mamba (`greenbench.models.mamba.context_parallel`) and Mamba-2
(`greenbench.models.mamba2.context_parallel`, its SSD scan's state).

Why our own: PyTorch's `torch.distributed.tensor.experimental.context_parallel` swaps CUDA SDPA
kernels (flash / efficient / cuDNN) for ring versions, under ``is_causal`` with no mask, and
supports nothing else; on CPU (gloo), for packed rows (a document mask), and for a state-space
model on any device, the exchange has to be written with point-to-point sends, which is what
these modules do. All of it is ordinary torch code and runs on CUDA too. Where PyTorch's can run
(the Transformer on CUDA with rows of one document each) the card's choice takes it
(`greenbench.models.card.ModelCard.cp_form`; `greenbench.models.transformer.torch_cp`).

Gradients: each CP rank's parameter gradients are its chunk's share; the strategy SUMS them over
the cp group (e.g. FSDP over ``dp_shard × cp`` with a loss already normalised by the global token
count), never averages them.
"""

from __future__ import annotations

import torch

from greenbench.distributed.cp_group import CPGroup, exchange

__all__ = [
    "CP_LAYOUTS",
    "CPGroup",
    "chunk_index",
    "chunk_pieces",
    "exchange",
    "granule",
    "split_sequence",
    "take_chunk",
]

IGNORE_INDEX = -100

#: how a row is cut over the cp ranks (module docstring)
CP_LAYOUTS = ("contiguous", "zigzag")


def granule(cp: int, layout: str) -> int:
    """What a row's length must be a multiple of under ``layout``: ``cp`` runs, or ``2·cp``."""
    if layout not in CP_LAYOUTS:
        raise ValueError(f"unknown cp layout {layout!r}; known: {', '.join(CP_LAYOUTS)}")
    return cp if layout == "contiguous" else 2 * cp


def chunk_pieces(cp_rank: int, cp: int, tokens: int, layout: str) -> tuple[tuple[int, int], ...]:
    """The [start, stop) ranges of a ``tokens``-long row that rank ``cp_rank`` holds, in the
    order it holds them (its chunk is their concatenation)."""
    if cp < 1 or not 0 <= cp_rank < cp:
        raise ValueError(f"cp_rank must be in [0, {cp}), got {cp_rank} (cp={cp})")
    runs = granule(cp, layout)
    if tokens % runs:
        raise ValueError(
            f"sequence length {tokens} is not divisible by {runs} (cp={cp}, {layout}); pad it"
        )
    size = tokens // runs
    if layout == "contiguous":
        return ((cp_rank * size, (cp_rank + 1) * size),)
    tail = runs - 1 - cp_rank
    return ((cp_rank * size, (cp_rank + 1) * size), (tail * size, (tail + 1) * size))


def chunk_index(
    cp_rank: int, cp: int, tokens: int, layout: str, device: torch.device | None = None
) -> torch.Tensor:
    """The row positions (0 … tokens − 1) of rank ``cp_rank``'s chunk, in its order."""
    return torch.cat(
        [torch.arange(a, b, device=device) for a, b in chunk_pieces(cp_rank, cp, tokens, layout)]
    )


def take_chunk(tensor: torch.Tensor, cp_rank: int, cp: int, layout: str) -> torch.Tensor:
    """Rank ``cp_rank``'s chunk of a (B, T) tensor (a copy, contiguous)."""
    pieces = chunk_pieces(cp_rank, cp, tensor.shape[1], layout)
    return torch.cat([tensor[:, a:b] for a, b in pieces], dim=1).contiguous()


def split_sequence(
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    position_ids: torch.Tensor,
    cp_rank: int,
    cp: int,
    layout: str = "contiguous",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This rank's chunk of (B, T) tensors under ``layout``: (input ids, shifted labels,
    positions).

    ``shifted[:, t] = labels[:, t + 1]`` over the whole row (the last is -100) before cutting,
    so the caller scores logits against the returned labels WITHOUT a further shift, and the
    per-rank sums of token losses add up to the row's whatever the layout (each position's
    label goes with it). T must be divisible by ``cp`` (``2·cp`` for zigzag; ValueError
    otherwise; the caller pads, with -100 labels). ``position_ids`` may be (1, T); its chunk is
    taken the same way.
    """
    if cp < 1 or not 0 <= cp_rank < cp:
        raise ValueError(f"cp_rank must be in [0, {cp}), got {cp_rank} (cp={cp})")
    if input_ids.dim() != 2 or labels.shape != input_ids.shape:
        raise ValueError(
            f"input_ids and labels must be (B, T) of one shape, got {tuple(input_ids.shape)} "
            f"and {tuple(labels.shape)}"
        )
    if position_ids.dim() != 2 or position_ids.shape[1] != input_ids.shape[1]:
        raise ValueError(f"position_ids must be (B, T) or (1, T), got {tuple(position_ids.shape)}")
    shifted = torch.full_like(labels, IGNORE_INDEX)
    shifted[:, :-1] = labels[:, 1:]
    return (
        take_chunk(input_ids, cp_rank, cp, layout),
        take_chunk(shifted, cp_rank, cp, layout),
        take_chunk(position_ids, cp_rank, cp, layout),
    )
