"""Mamba-2's torch scan against transformers' torch path, on the CPU: the evidence for
`greenbench.models.mamba2.ssd` being ours.

1. The scan alone: forward + backward of one layer of the ``tiny`` preset (8 heads × 64, state
   64, one group) at ``--batch`` × ``--seq-len``, greenbench's `ssd_scan` at chunk lengths 32 to
   256 against transformers' `mamba2_chunk_scan` (what `Mamba2Mixer` runs without mamba-ssm).
2. The training step of the ``tiny`` model (forward, backward, AdamW) with our mixer against the
   same weights with transformers' own mixer class, beside Mamba-1 and the Transformer.

Every variant runs in turn, ``--rounds`` times, and the minimum and the median are printed: on
a shared machine the minimum is the figure least disturbed by other processes.

    python benchmarks/mamba2_scan.py [--batch 4] [--seq-len 1024] [--rounds 5] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F


def timed_rounds(variants: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each variant, run in turn ``rounds`` times after one unmeasured call each."""
    for run in variants.values():
        run()
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def scan_variants(batch: int, seq_len: int) -> dict[str, Callable[[], None]]:
    from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan

    from greenbench.models.mamba2 import ssd_scan

    g = torch.Generator().manual_seed(0)
    heads, head_dim, state = 8, 64, 64
    x = torch.randn(batch, seq_len, heads, head_dim, generator=g)
    dt = F.softplus(torch.randn(batch, seq_len, heads, generator=g) - 3.0)
    A = -torch.arange(1.0, heads + 1.0)
    B = torch.randn(batch, seq_len, 1, state, generator=g)
    C = torch.randn(batch, seq_len, 1, state, generator=g)
    inputs = [t.requires_grad_() for t in (x, dt, A, B, C)]

    def run(scan: Callable[..., torch.Tensor], chunk: int) -> Callable[[], None]:
        return lambda: scan(*inputs, chunk_size=chunk).square().sum().backward()

    variants = {f"ours, Q={q}": run(ssd_scan, q) for q in (32, 64, 128, 256)}
    variants.update({f"transformers, Q={q}": run(mamba2_chunk_scan, q) for q in (64, 256)})
    return variants


def step_variants(batch: int, seq_len: int) -> dict[str, Callable[[], None]]:
    import copy

    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    from greenbench.models import build_model
    from greenbench.models.mamba2 import SSDMamba2Mixer

    ids = torch.randint(0, 1024, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    models = {f: build_model(f, "tiny", seed=0) for f in ("transformer", "mamba", "mamba2")}
    theirs = copy.deepcopy(models["mamba2"])
    for module in theirs.modules():
        if type(module) is SSDMamba2Mixer:
            module.__class__ = Mamba2Mixer
    models["mamba2, transformers' mixer"] = theirs

    def step(model: torch.nn.Module) -> Callable[[], None]:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def run() -> None:
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()

        return run

    return {name: step(model) for name, model in models.items()}


def report(title: str, seconds: dict[str, list[float]], tokens: int) -> None:
    print(title)
    for name, values in seconds.items():
        low, mid = min(values), statistics.median(values)
        print(f"  {name:32s} min {low:7.3f} s  median {mid:7.3f} s  {tokens / low:9,.0f} tok/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers.utils import logging

    logging.set_verbosity_error()  # transformers' fallback warning, once per call
    tokens = args.batch * args.seq_len
    print(f"batch {args.batch} × {args.seq_len}, {torch.get_num_threads()} threads, float32")
    scans = timed_rounds(scan_variants(args.batch, args.seq_len), args.rounds)
    report("scan of one tiny layer, forward + backward:", scans, tokens)
    steps = timed_rounds(step_variants(args.batch, args.seq_len), args.rounds)
    report("tiny training step (forward, backward, AdamW):", steps, tokens)


if __name__ == "__main__":
    main()
