"""What skipping stages costs in loss: convergence of skip-trained against full-trained tiny
models, and perplexity with stages removed at inference (SkipPipe's fault-tolerance question).

Both models start from the same weights and see the same minibatches of the synthetic Markov
data (whose entropy rate, the loss floor, is known). The full model runs every block for every
microbatch; the skip-trained one runs, for each microbatch, only the stages of its path (the
runner's paths: ``round(S·(1−skip))`` of the ``S`` stages of blocks, subsets taken in turn). This
runs in one process: a path through stages is the same arithmetic on one rank as on several, and
the 4-rank runner's own iteration times are measured by ``greenbench run --suite skippipe``.

Energy per unit of loss reduction is the CPU estimate (TDP × utilisation; no counter on this
machine): labelled as an estimate wherever it is printed.

    python benchmarks/skippipe_quality.py [--steps 300] [--out reports/skippipe-cpu]
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from greenbench.data import DataPlan, MarkovSource
from greenbench.energy import select_meter
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.strategies.skippipe.routes import stage_layers

IGNORE = -100


def build(family: str, stages: int, seed: int = 0):
    """(embed, stage modules, head, parameters) of a fresh tiny model cut into ``stages``."""
    fam = FAMILIES[family]
    builder = ModelBuilder(fam, "tiny", seed=seed, kernel="auto")
    model = builder.build("cpu")
    n = len(builder.blocks(model))
    embed = fam.pipeline_stage(model, 0, 0, embed=True, head=False)
    head = fam.pipeline_stage(model, n, n, embed=False, head=True)
    parts = [fam.pipeline_stage(model, lo, hi, embed=False, head=False)
             for lo, hi in stage_layers(n, stages)]  # fmt: skip
    return embed, parts, head, list(model.parameters()), builder.info


def loss_of(embed, parts, head, mb, path) -> torch.Tensor:
    ids, pos = mb.input_ids, mb.position_ids
    labels = F.pad(mb.labels[:, 1:], (0, 1), value=IGNORE)
    h, pos = embed(ids, pos)
    for s in path:
        h, pos = parts[s](h, pos)
    logits = head(h, pos)
    return F.cross_entropy(
        logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE, reduction="sum"
    )


def train(family: str, stages: int, skip: float, steps: int, plan: DataPlan) -> dict:
    embed, parts, head, params, _ = build(family, stages)
    visit = max(1, round(stages * (1 - skip)))
    subsets = list(itertools.combinations(range(stages), visit))
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    meter = select_meter("cpu", None)
    curve, turn = [], 0
    tokens, seconds, joules = 0, 0.0, 0.0
    for step in range(steps):
        batch = plan.part(step, 0, 1)
        meter.begin()
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for mb in batch.microbatches:
            path = subsets[turn % len(subsets)]
            turn += 1
            loss = loss_of(embed, parts, head, mb, path)
            (loss / batch.global_tokens).backward()
            total += float(loss.detach())
        optimizer.step()
        seconds += time.perf_counter() - t0
        window = meter.end()
        joules += window.energy_j if window and window.energy_j is not None else math.nan
        tokens += batch.global_tokens
        curve.append((tokens, seconds, joules, total / batch.global_tokens))
    meter.close()
    label = "measured" if window and window.measured else "estimate"
    return {"curve": curve, "model": (embed, parts, head), "source": f"{window.source}, {label}"}


@torch.no_grad()
def perplexity(model, plan: DataPlan, keep: list[int], batches: int = 8) -> float:
    embed, parts, head = model
    total, count = 0.0, 0
    for step in range(10_000, 10_000 + batches):  # held-out steps never trained on
        batch = plan.part(step, 0, 1)
        for mb in batch.microbatches:
            total += float(loss_of(embed, parts, head, mb, keep))
        count += batch.global_tokens
    return math.exp(total / count)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="transformer")
    ap.add_argument("--stages", type=int, default=4, help="stages of blocks (tiny: 4 layers)")
    ap.add_argument("--skip", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--out", type=Path, default=None, help="write README.md and a plot here")
    args = ap.parse_args()
    torch.manual_seed(0)
    vocab = FAMILIES[args.family].info("tiny").vocab_size
    source = MarkovSource(vocab_size=vocab, seed=0)
    plan = DataPlan(source=source, lengths="fixed", seq_len=args.seq_len, global_batch=8,
                    micro_batch=1, balance="same-count", cost_model="linear", scale=1.0,
                    seed=0)  # fmt: skip
    floor = source.entropy_rate_nats
    runs = {}
    for name, skip in (("full", 0.0), (f"skip {args.skip:g}", args.skip)):
        print(f"training {name} ({args.steps} steps) …", flush=True)
        runs[name] = train(args.family, args.stages, skip, args.steps, plan)
    lines = [
        f"# SkipPipe: what skipping costs in loss ({args.family}/tiny, {args.stages} stages "
        f"of blocks, {args.steps} steps of 8 × {args.seq_len} tokens, one CPU process)",
        "",
        f"Loss floor (the Markov source's entropy rate): {floor:.3f} nats/token.",
        "",
        "| model | final loss | loss − floor | seconds | J (estimate) | J per nat of loss "
        "reduction (estimate) |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        _, seconds, joules, loss = run["curve"][-1]
        first = run["curve"][0][3]
        lines.append(
            f"| {name} | {loss:.3f} | {loss - floor:.3f} | {seconds:.1f} | {joules:.0f} "
            f"| {joules / max(first - loss, 1e-9):.1f} |"
        )
    lines += [
        "", "## Perplexity with stages removed at inference", "",
        "Mean over every choice of the stages kept (in order); held-out minibatches. "
        f"Perplexity at the floor: {math.exp(floor):.2f}.", "",
        "| stages kept | full-trained | skip-trained |", "|---|---|---|",
    ]  # fmt: skip
    for kept in range(args.stages, 0, -1):
        removed = 1 - kept / args.stages
        choices = list(itertools.combinations(range(args.stages), kept))
        ppl = [
            sum(perplexity(run["model"], plan, list(keep)) for keep in choices) / len(choices)
            for run in runs.values()
        ]
        lines.append(f"| {kept} of {args.stages} ({removed:.0%} removed) | {ppl[0]:.2f} "
                     f"| {ppl[1]:.2f} |")  # fmt: skip
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        plot(runs, floor, args.out / "convergence.png")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "README.md").write_text(
            text + "\n\n![loss against tokens and wall-clock](convergence.png)\n"
            f"\nMade with `python benchmarks/skippipe_quality.py --steps {args.steps} --out "
            f"{args.out}` on a 2-core CPU; energy is the CPU estimate "
            f"({runs['full']['source']}), not a measurement.\n"
        )


def plot(runs: dict, floor: float, path: Path):
    """Loss against tokens and against wall-clock, saved to ``path`` and returned. Tick labels
    are short (``300k`` tokens, not ``300000``) and few, so they never run together."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter, MaxNLocator

    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(10, 4), layout="constrained")
    for i, (x, label) in enumerate(((0, "tokens"), (1, "wall-clock seconds (one process)"))):
        ax = fig.add_subplot(1, 2, i + 1)
        for name, run in runs.items():
            ax.plot([c[x] for c in run["curve"]], [c[3] for c in run["curve"]], label=name)
        ax.axhline(floor, color="k", lw=0.8, ls="--", label="entropy floor")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
        if x == 0:
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 300k, not 300000
        ax.set_xlabel(label)
        ax.set_ylabel("training loss (nats/token)")
        ax.legend()
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    return fig


if __name__ == "__main__":
    main()
