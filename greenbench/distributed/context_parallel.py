"""Context parallelism (CP): a sequence split into contiguous chunks, one per rank of a group.

What every CP rank shares, whatever the model family:

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
between chunks for Mamba (`greenbench.models.mamba.context_parallel`); Mamba-2 has none.

Why our own: PyTorch's `torch.distributed.tensor.experimental.context_parallel` swaps CUDA SDPA
kernels (flash / efficient / cuDNN) for ring versions and supports nothing else; on CPU (gloo),
and for a state-space model on any device, the exchange has to be written with point-to-point
sends, which is what these modules do. All of it is ordinary torch code and runs on CUDA too.

Gradients: each CP rank's parameter gradients are its chunk's share; the strategy SUMS them over
the cp group (e.g. FSDP over ``dp_shard × cp`` with a loss already normalised by the global token
count), never averages them.
"""

from __future__ import annotations

import torch

from greenbench.distributed.cp_group import CPGroup, exchange

__all__ = ["CPGroup", "exchange", "split_sequence"]

IGNORE_INDEX = -100


def split_sequence(
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    position_ids: torch.Tensor,
    cp_rank: int,
    cp: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This rank's contiguous chunk of (B, T) tensors: (input ids, shifted labels, positions).

    ``shifted[:, t] = labels[:, t + 1]`` over the whole row (the last is -100) before cutting,
    so the caller scores logits against the returned labels WITHOUT a further shift. T must be
    divisible by ``cp`` (ValueError otherwise; the caller pads, with -100 labels). ``position_ids``
    may be (1, T); its chunk is taken the same way.
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
    tokens = input_ids.shape[1]
    if tokens % cp:
        raise ValueError(f"sequence length {tokens} is not divisible by cp={cp}; pad it first")
    shifted = torch.full_like(labels, IGNORE_INDEX)
    shifted[:, :-1] = labels[:, 1:]
    size = tokens // cp
    part = slice(cp_rank * size, (cp_rank + 1) * size)
    return (
        input_ids[:, part].contiguous(),
        shifted[:, part].contiguous(),
        position_ids[:, part].contiguous(),
    )
