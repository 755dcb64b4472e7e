"""What skipping stages costs in loss: convergence of skip-trained against full-trained tiny
models, and perplexity with stages removed at inference (SkipPipe's fault-tolerance question).

Both models start from the same weights and see the same minibatches of the synthetic Markov
data (whose entropy rate, the loss floor, is known). The full model runs every block for every
microbatch; the skip-trained one runs, for each microbatch, only the stages of its path (the
runner's paths: ``round(S·(1−skip))`` of the ``S`` stages of blocks, subsets taken in turn). This
runs in one process: a path through stages is the same arithmetic on one rank as on several, and
the 4-rank runner's own iteration times are measured by ``greenbench run --suite skippipe``.

Both are judged at equal quality: the steps, tokens, seconds and joules each takes to bring the
loss on a held-out set (documents from a stream training never draws, evaluated every
``--eval-every`` steps outside the measured time) to common targets, ``--gap-closed`` of the gap
between ln V (an untrained model) and the floor, as ``greenbench run --suite convergence`` does
with the real 4-rank runner. A model that does not get there within ``--steps`` is "not
reached", with its best held-out loss. Energy is the CPU estimate (TDP × utilisation; no
counter on this machine): labelled as an estimate wherever it is printed.

    python benchmarks/skippipe_quality.py [--steps 300] [--seeds 2] [--out reports/skippipe-cpu]
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
from greenbench.data.target import target_loss
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


def train(
    family: str, stages: int, skip: float, steps: int, plan: DataPlan, *, seed: int, every: int
) -> dict:
    """Train ``steps`` steps; every ``every`` steps (and before the first) the full model's
    held-out loss, outside the measured seconds and joules: (step, tokens, seconds, joules,
    held-out loss) each."""
    embed, parts, head, params, _ = build(family, stages, seed)
    held_out = plan.held_out(64).part(0, 0, 1)
    visit = max(1, round(stages * (1 - skip)))
    subsets = list(itertools.combinations(range(stages), visit))
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    meter = select_meter("cpu", None)
    curve, turn, evals = [], 0, []
    tokens, seconds, joules = 0, 0.0, 0.0
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            val = held_out_loss((embed, parts, head), held_out, list(range(stages)))
            evals.append((step, tokens, seconds, joules, val))
        if step == steps:
            break
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
    return {
        "curve": curve,
        "evals": evals,
        "model": (embed, parts, head),
        "source": f"{window.source}, {label}",
    }


@torch.no_grad()
def held_out_loss(model, batch, keep: list[int]) -> float:
    """Mean loss per token of ``model`` through the stages ``keep`` on the held-out ``batch``."""
    embed, parts, head = model
    total = sum(float(loss_of(embed, parts, head, mb, keep)) for mb in batch.microbatches)
    return total / batch.global_tokens


def to_target(evals: list[tuple], target: float) -> tuple | None:
    """The first evaluation at or below ``target`` (None: not reached)."""
    return next((e for e in evals if e[4] <= target), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="transformer")
    ap.add_argument("--stages", type=int, default=4, help="stages of blocks (tiny: 4 layers)")
    ap.add_argument("--skip", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=2, help="initialisations and data streams")
    ap.add_argument("--eval-every", type=int, default=10, help="steps between evaluations")
    ap.add_argument(
        "--gap-closed", type=float, nargs="+", default=[0.6, 0.9], help="the common targets"
    )
    ap.add_argument("--out", type=Path, default=None, help="write README.md and a plot here")
    args = ap.parse_args()
    vocab = FAMILIES[args.family].info("tiny").vocab_size
    source = MarkovSource(vocab_size=vocab, seed=0)
    floor = source.entropy_rate_nats
    runs: dict[tuple[str, int], dict] = {}
    plans = []
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        plan = DataPlan(source=source, lengths="fixed", seq_len=args.seq_len, global_batch=8,
                        micro_batch=1, balance="same-count", cost_model="linear", scale=1.0,
                        seed=seed)  # fmt: skip
        plans.append(plan)
        for name, skip in (("full", 0.0), (f"skip {args.skip:g}", args.skip)):
            print(f"training {name}, seed {seed} ({args.steps} steps) …", flush=True)
            runs[(name, seed)] = train(
                args.family, args.stages, skip, args.steps, plan, seed=seed, every=args.eval_every
            )
    targets = {g: target_loss(vocab, floor, gap_closed=g) for g in args.gap_closed}
    lines = [
        f"# SkipPipe: what skipping costs in loss ({args.family}/tiny, {args.stages} stages "
        f"of blocks, up to {args.steps} steps of 8 × {args.seq_len} tokens, one CPU process, "
        f"{args.seeds} seeds)",
        "",
        f"Loss floor (the Markov source's entropy rate): {floor:.3f} nats/token; ln V = "
        f"{math.log(vocab):.3f}. A common target is a share of the gap between them, the "
        f"held-out loss evaluated every {args.eval_every} steps (evaluation kept out of the "
        "seconds and joules).",
    ]
    names = list(dict.fromkeys(name for name, _ in runs))
    for gap, target in targets.items():
        lines += [
            "",
            f"## Energy and time to {gap:g} of the gap (held-out loss {target:.3f})",
            "",
            "| model | seed | steps to target | tokens to target | seconds to target "
            "| J to target (estimate) | held-out loss after all steps |",
            "|---|---|---|---|---|---|---|",
        ]
        reached: dict[str, list[tuple]] = {}
        for (name, seed), run in runs.items():
            hit = to_target(run["evals"], target)
            last = run["evals"][-1][4]
            if hit is None:
                best = min(e[4] for e in run["evals"])
                lines.append(
                    f"| {name} | {seed} | not reached (best {best:.3f}) | | | | {last:.3f} |"
                )
                continue
            reached.setdefault(name, []).append(hit)
            step, tokens, seconds, joules, _ = hit
            lines.append(f"| {name} | {seed} | {step} | {tokens:,} | {seconds:.1f} "
                         f"| {joules:.0f} | {last:.3f} |")  # fmt: skip
        if all(len(reached.get(n, ())) == args.seeds for n in names):
            full, skipped = (reached[n] for n in names)
            lo = min(b[3] / a[3] for a in full for b in skipped)
            hi = max(b[3] / a[3] for a in full for b in skipped)
            ratio = f"{lo:.2f}× to {hi:.2f}× (estimate: it follows the seconds)."
            lines += [
                "",
                f"Energy to target of {names[1]} over full, over every pair of seeds: " + ratio,
            ]
        else:
            lines += ["", "Not every seed of both models reached it within the steps: no ratio."]
    lines += ["", "![held-out loss against tokens and wall-clock](convergence.png)"]
    seed0 = {name: runs[(name, 0)] for name in names}
    held_out = plans[0].held_out(64).part(0, 0, 1)
    lines += [
        "", "## Perplexity with stages removed at inference", "",
        "Seed 0's models after all steps. Mean over every choice of the stages kept (in "
        "order); the held-out set. "
        f"Perplexity at the floor: {math.exp(floor):.2f}.", "",
        "| stages kept | full-trained | skip-trained |", "|---|---|---|",
    ]  # fmt: skip
    for kept in range(args.stages, 0, -1):
        removed = 1 - kept / args.stages
        choices = list(itertools.combinations(range(args.stages), kept))
        ppl = [
            sum(math.exp(held_out_loss(run["model"], held_out, list(keep))) for keep in choices)
            / len(choices)
            for run in seed0.values()
        ]
        lines.append(f"| {kept} of {args.stages} ({removed:.0%} removed) | {ppl[0]:.2f} "
                     f"| {ppl[1]:.2f} |")  # fmt: skip
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        plot(seed0, floor, list(targets.values()), args.out / "convergence.png")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "README.md").write_text(
            text + f"\n\nMade with `python benchmarks/skippipe_quality.py --steps {args.steps} "
            f"--seeds {args.seeds} --out {args.out}` on a 2-core CPU; energy is the CPU "
            f"estimate ({seed0['full']['source']}), not a measurement.\n"
        )


def plot(runs: dict, floor: float, targets: list[float], path: Path):
    """Held-out loss against tokens and against wall-clock, with the targets and the floor, saved
    to ``path`` and returned. Tick labels
    are short (``300k`` tokens, not ``300000``) and few, so they never run together."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter, MaxNLocator

    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(10, 4), layout="constrained")
    for i, (x, label) in enumerate(((1, "tokens"), (2, "training seconds (one process)"))):
        ax = fig.add_subplot(1, 2, i + 1)
        for name, run in runs.items():
            ax.plot([e[x] for e in run["evals"]], [e[4] for e in run["evals"]], label=name)
        for k, target in enumerate(targets):
            ax.axhline(target, color="tab:red", lw=0.8, ls=":", label="targets" if k == 0 else None)
        ax.axhline(floor, color="k", lw=0.8, ls="--", label="entropy floor")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
        if x == 1:  # tokens
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 300k, not 300000
        ax.set_xlabel(label)
        ax.set_ylabel("held-out loss (nats/token)")
        ax.legend()
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    return fig


if __name__ == "__main__":
    main()
