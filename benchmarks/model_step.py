"""Training-step time of Mamba against the Transformer of the same preset, measured in one run.

Builds both families at one size (default ``tiny``), times a full training step (forward,
backward, AdamW step) on the same random batch (default 8 × 1024 tokens, float32, torch's default
thread count) after a few unmeasured warm-up steps, and prints each median and the ratio:

    python benchmarks/model_step.py [--size tiny] [--batch 8] [--seq-len 1024] [--steps 5]

Target on the 2-core CPU reference machine: ``mamba/transformer step time`` at most 2.
`time_train_step` is importable (``from benchmarks.model_step import time_train_step``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from greenbench.models import build_model, model_info


def make_batch(
    vocab_size: int, batch_size: int, seq_len: int, *, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Uniform random tokens as ``input_ids``, themselves as ``labels`` (the model shifts)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    return {"input_ids": input_ids, "labels": input_ids.clone()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_train_step(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    steps: int,
    *,
    warmup: int = 2,
    lr: float = 1e-4,
) -> list[float]:
    """Seconds of each of ``steps`` training steps (forward + backward + AdamW step), timed after
    ``warmup`` unmeasured ones; the device is synchronised before every clock reading."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got {steps=} {warmup=}")
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    seconds: list[float] = []
    for i in range(warmup + steps):
        _sync(device)
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        if i >= warmup:
            seconds.append(time.perf_counter() - start)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    vocab = model_info("transformer", args.size).vocab_size
    batch = make_batch(vocab, args.batch, args.seq_len, seed=args.seed)
    print(
        f"preset {args.size}, batch {args.batch} x {args.seq_len} tokens, float32, "
        f"{torch.get_num_threads()} threads, {args.warmup} warm-up + {args.steps} timed steps"
    )
    medians: dict[str, float] = {}
    for family in ("transformer", "mamba"):
        info = model_info(family, args.size)
        model = build_model(family, args.size, seed=args.seed)
        seconds = time_train_step(model, batch, args.steps, warmup=args.warmup)
        medians[family] = statistics.median(seconds)
        print(
            f"{family:12s} {info.n_params / 1e6:7.2f} M params  step median "
            f"{medians[family]:.3f} s  (min {min(seconds):.3f}, max {max(seconds):.3f})"
        )
        del model
    print(f"mamba/transformer step time = {medians['mamba'] / medians['transformer']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
