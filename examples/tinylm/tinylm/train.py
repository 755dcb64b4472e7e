"""Train tinylm with plain PyTorch, and measure the loop with ``greenbench.measure``.

    python -m tinylm.train --steps 30 --db results.duckdb --label main
    torchrun --nproc-per-node 2 -m tinylm.train --steps 30 --db results.duckdb   # DDP over gloo

Without ``--db`` nothing is measured from inside; the script still writes the tokens it trained
to ``$GREENBENCH_TOKENS_FILE`` when that is set, which is how ``greenbench measure -- python -m
tinylm.train`` learns them for its whole-process measurement. Under torchrun each rank ends with
`end_rank` (see there for why).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import torch
import torch.distributed as dist

import greenbench
from tinylm.data import token_batch
from tinylm.model import TinyConvLM, next_token_loss


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tinylm.train")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--db", help="measure the loop into this greenbench database")
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)

    world = int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    torch.manual_seed(0)
    model: torch.nn.Module = TinyConvLM(vocab=256, width=64, depth=2)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    measuring = contextlib.nullcontext()
    if args.db:
        measuring = greenbench.measure(
            name="tinylm-train", label=args.label, db=args.db, warmup_steps=args.warmup
        )
    tokens = 0
    with measuring as m:
        for step in range(args.steps):
            batch = token_batch(
                seed=0, step=step, rank=rank, rows=args.rows, seq_len=129, vocab=256
            )
            loss = next_token_loss(model, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            tokens += batch[:, 1:].numel()
            if m is not None:
                m.step(tokens=batch[:, 1:].numel())
    if world > 1:  # every rank's tokens, for the whole-process count
        total = torch.tensor([tokens])
        dist.all_reduce(total)
        tokens = int(total.item())
        dist.destroy_process_group()
    path = os.environ.get("GREENBENCH_TOKENS_FILE")
    if path and rank == 0:
        with open(path, "w") as f:
            f.write(f"{tokens}\n")
    if rank == 0:
        print(f"trained {tokens} tokens, last loss {loss.item():.3f}")


def end_rank() -> None:
    """Leave a torchrun rank without the interpreter's shutdown, once everything is written.

    DDP keeps gloo's worker threads alive past ``destroy_process_group`` (torch 2.x), and one
    still freeing the last collective's tensors when the interpreter shuts down aborts the rank
    (SIGABRT, "terminate called without an active exception"): the job fails after it has
    succeeded. ``os._exit`` skips that shutdown; the database and the tokens file are closed.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        end_rank()
