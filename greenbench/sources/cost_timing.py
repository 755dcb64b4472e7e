"""This machine's per-microbatch times for a model, and the balancing cost fit made of them.

`time_microbatches` builds the model (``family``, ``size``, the run's kernel) on the CPU and
times forward and backward of the next-token loss on one row holding one document of ``T``
tokens, for each ``T`` asked (the fastest of a few trials each: a neighbour's load only ever
adds time). `calibrated_fit` returns the fit stored for this machine and model
(`greenbench.data.cost_fit`), or measures, fits and stores it first.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import torch

from greenbench.data.batches import collate_microbatch
from greenbench.data.cost_fit import CostFit, FitKey, fit_cost, load_fit, store_fit
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.sources.builtin import next_token_loss

#: the lengths timed, as shares of the row (``data.seq_len``)
SHARES = (1 / 16, 1 / 8, 1 / 4, 3 / 8, 1 / 2, 5 / 8, 3 / 4, 7 / 8, 1.0)
TRIALS = 3


def time_microbatches(
    family: str,
    size: str,
    lengths: Sequence[int],
    *,
    kernel: str = "auto",
    threads: int = 1,
    trials: int = TRIALS,
    precision: str = "fp32",
) -> list[float]:
    """Seconds of forward and backward of one document of each of ``lengths`` tokens (one row,
    one microbatch) on ``threads`` CPU threads, autocast to bf16 where ``precision`` says: the
    fastest of ``trials`` each, after one untimed warm-up."""

    def autocast() -> contextlib.AbstractContextManager[object]:
        if precision == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = ModelBuilder(FAMILIES[family], size, seed=0, kernel=kernel).build("cpu")
        vocab = FAMILIES[family].info(size).vocab_size
        generator = torch.Generator().manual_seed(0)
        out = []
        for n in lengths:
            doc = torch.randint(1, vocab, (int(n),), generator=generator)
            mb = collate_microbatch([[doc]])
            best = float("inf")
            for trial in range(trials + 1):
                model.zero_grad(set_to_none=True)
                start = time.perf_counter()
                next_token_loss(model, mb, torch.device("cpu"), autocast).backward()
                if trial:  # the first is the warm-up
                    best = min(best, time.perf_counter() - start)
            out.append(best)
        return out
    finally:
        torch.set_num_threads(previous)


def calibrated_fit(
    family: str,
    size: str,
    seq_len: int,
    *,
    precision: str = "fp32",
    threads: int = 1,
    kernel: str = "auto",
    refit: bool = False,
) -> CostFit:
    """The stored fit of this machine and model, or one measured now (lengths up to
    ``seq_len``), fitted and stored. ``refit``: measure again even where one is stored."""
    key = FitKey.here(family, size, precision, threads, torch.__version__)
    stored = None if refit else load_fit(key)
    if stored is not None and stored.tokens and max(stored.tokens) >= seq_len:
        return stored  # measured up to this row length at least: no extrapolation
    lengths = sorted({max(2, round(seq_len * share)) for share in SHARES})
    seconds = time_microbatches(
        family, size, lengths, kernel=kernel, threads=threads, precision=precision
    )
    a, b = fit_cost(lengths, seconds)
    fit = CostFit(key=key, a=a, b=b, tokens=tuple(lengths), seconds=tuple(seconds))
    store_fit(fit)
    return fit
