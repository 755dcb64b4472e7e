"""Training-step time of Mamba against the Transformer, and what measuring costs, in one run.

1. Builds both families at one size (default ``tiny``), times a full training step (forward,
   backward, AdamW step) on the same random batch (default 8 × 1024 tokens, float32, torch's
   default thread count) after unmeasured warm-up steps, and prints each median and the ratio.
   Target on the 2-core CPU reference machine: ``mamba/transformer step time`` at most 2.
2. Times, on the same machine, everything the worker adds to a measured window: the meter this
   machine would select (``begin()`` + ``end()``), the clock readings around a step, and the
   window's accounting (``WindowTally.add`` and the analytic FLOPs of
   a real packed batch of the same shape). Each is timed over many calls and divided by the
   Transformer's median step time. Charging the meter pair to every step (a window of one step,
   the worst case) gives the bound printed last. Target: at most 1 %.

    python benchmarks/step_time.py [--size tiny] [--batch 8] [--seq-len 1024] [--steps 5]

`time_train_step` is importable (``from benchmarks.step_time import time_train_step``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from greenbench.data import MarkovSource, make_step_batches
from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.device import StepTimes
from greenbench.energy import select_meter
from greenbench.models import build_model, model_info
from greenbench.rank.window import WindowTally
from greenbench.sources.builtin import batch_flops


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


def per_call_s(fn, calls: int) -> float:
    """Median over 5 rounds of the mean seconds per call of ``fn`` over ``calls`` calls."""
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls)
    return statistics.median(rounds)


def measurement_costs(size: str, batch_size: int, seq_len: int) -> dict[str, float]:
    """Seconds per call of each piece of measurement the worker runs inside a window."""
    info = model_info("transformer", size)
    meter = select_meter("cpu", None)
    batch = make_step_batches(
        0,
        source=MarkovSource(vocab_size=info.vocab_size, seed=0),
        lengths="fixed",
        seq_len=seq_len,
        global_batch=batch_size,
        micro_batch=batch_size,
        world_size=1,
        mode="same-count",
        cost_model="linear",
        scale=1.0,
        seed=0,
    )[0]

    def meter_pair() -> None:
        meter.begin()
        meter.end()

    def step_clocks() -> None:
        # the worker's readings around a step, and train_step's own start/stop
        for _ in range(4):
            time.perf_counter()
        StepTimes()

    tally = WindowTally()

    def accounting() -> None:
        tally.add(0.1, StepTimes(), 1.0, batch, batch_flops(info, batch))

    costs = {
        f"meter {meter.source} begin+end": per_call_s(meter_pair, 200),
        "step clocks": per_call_s(step_clocks, 20_000),
        "tally + analytic FLOPs": per_call_s(accounting, 20_000),
    }
    meter.close()
    return costs


def comm_record_cost() -> float:
    """Seconds per recorded collective (a span around a call: two clock reads and a record);
    a multi-rank step makes a handful (DDP) to a few per layer and microbatch (FSDP)."""
    comm = CommRecorder(torch.device("cpu"))

    def record() -> None:
        with comm.span("dp_shard", "all_gather", 1024):
            pass
        if len(comm.calls) > 10_000:
            comm.calls.clear()

    return per_call_s(record, 20_000)


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

    step_s = medians["transformer"]
    costs = measurement_costs(args.size, args.batch, args.seq_len)
    for name, seconds in costs.items():
        print(f"{name:28s} {seconds * 1e6:9.1f} us  = {100 * seconds / step_s:.4f} % of a step")
    print(f"measurement overhead (window of one step) = {100 * sum(costs.values()) / step_s:.3f} %")
    per_record = comm_record_cost()
    print(
        f"{'comm record (per collective)':28s} {per_record * 1e6:9.1f} us  = "
        f"{100 * per_record / step_s:.4f} % of a step each (multi-rank runs only)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
