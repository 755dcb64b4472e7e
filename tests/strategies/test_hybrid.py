"""Every hybrid layout trains as one process does, and really is the layout it claims.

Four real gloo processes train a few optimizer steps of each layout on the data a single
process trains on. Checked per layout: the loss of every step equals the single process's
(fp32; rtol 1e-4: the layouts sum the same terms in other orders), each rank holds the
parameters its sharding gives it (counted from its local tensors, against a count made from
the full model's names and shapes), and the communication records show the layout's
collectives on the right mesh dimensions.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from helpers import free_port, spawn

from greenbench.data import DataPlan, MarkovSource
from greenbench.distributed.device import DistContext
from greenbench.models import FAMILIES, ModelBuilder
from greenbench.settings import SCHEMA
from greenbench.sources.builtin import next_token_loss
from greenbench.strategies import STRATEGIES
from greenbench.vocabulary import Layout

STEPS = 3
LR = 0.5
DATA = dict(
    lengths="fixed",
    seq_len=32,
    global_batch=8,
    micro_batch=1,
    balance="same-count",
    cost_model="linear",
    scale=1.0,
    seed=3,
)

#: layout -> the (dimension, operation) records it must show
LAYOUTS = {
    "dpr1-dps4-tp1-pp1-cp1": {("dp_shard", "all_gather"), ("dp_shard", "reduce_scatter")},
    "dpr1-dps2-tp2-pp1-cp1": {("tp", "all_reduce"), ("dp_shard", "reduce_scatter")},
    "dpr1-dps2-tp1-pp2-cp1": {("pp", "send"), ("pp", "recv"), ("dp_shard", "all_gather")},
    "dpr1-dps1-tp1-pp4-cp1": {("pp", "send"), ("pp", "recv")},
    "dpr1-dps2-tp1-pp1-cp2": {("cp", "send"), ("dp_shard_cp", "reduce_scatter")},
    "dpr1-dps1-tp2-pp2-cp1": {("tp", "all_reduce"), ("pp", "send"), ("pp", "recv")},
}


def settings(layout: Layout, family: str, schedule: str) -> dict:
    return {
        "model.family": family,
        "train.pp_schedule": schedule,
        "data.seq_len": DATA["seq_len"],
        "data.micro_batch": DATA["micro_batch"],
        "data.global_batch": DATA["global_batch"],
    }


def train(family: str, layout: Layout, rank: int, schedule: str, checkpoint: bool = False) -> dict:
    from greenbench.rank.mesh import build_mesh

    builder = ModelBuilder(FAMILIES[family], "tiny", seed=0, kernel="auto", checkpoint=checkpoint)
    ctx = DistContext(rank, rank, layout.world, torch.device("cpu"), torch.float32)
    if layout.world == 1:
        strategy = STRATEGIES["single"].load()(ctx)
    else:
        mesh = build_mesh(layout, "cpu")
        strategy = STRATEGIES["hybrid"].load()(ctx, mesh, None, layout)
        strategy.configure(SCHEMA.config(settings(layout, family, schedule)))
    model = strategy.parallelize(builder)
    schedule = strategy.schedule(next_token_loss)
    optimizer = torch.optim.SGD(strategy.parameters(model), lr=LR)
    plan = DataPlan(source=MarkovSource(vocab_size=builder.info.vocab_size, seed=1), **DATA)
    losses, calls, replicated = [], set(), []
    for step in range(STEPS):
        loss, _ = schedule.train_step(model, optimizer, strategy.assignment.batch(plan, step))
        losses.append(loss)
        step_calls = strategy.comm.take()
        calls |= {(c.dim, c.op) for c in step_calls}
        replicated.append(
            sum(c.nbytes for c in step_calls if (c.dim, c.op) == ("dp_replicate", "all_reduce"))
        )
    local = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())
    return {
        "losses": losses,
        "params": local,
        "calls": calls,
        "counts": strategy.counts_tokens,
        "replicated": replicated,
    }


def _worker(
    rank: int, port: int, family: str, texts: list[str], schedule: str, out: str, checkpoint: bool
) -> None:
    """Every layout in turn on one 4-rank process group (one start-up for all of them)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=4)
    try:
        results = {
            text: train(family, Layout.parse(text), rank, schedule, checkpoint) for text in texts
        }
        torch.save(results, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def expected_params(family: str, layout: Layout, rank: int) -> int:
    """Parameters rank ``rank`` holds: its stage's, split by tp, then by FSDP's dim-0 chunks."""
    from greenbench.strategies.hybrid.pp import stage_bounds

    model = FAMILIES[family].build("tiny", vocab_size=None, kernel="auto")
    n_layers = len(FAMILIES[family].blocks(model))
    coords = dict(zip(*_coordinates(layout, rank), strict=True))
    lo, hi = stage_bounds(n_layers, layout.pp, coords.get("pp", 0))
    plan = FAMILIES[family].tensor_parallel.plan
    split = (
        {re.escape(k) + r"\.weight$": 0 if v == "colwise" else 1 for k, v in plan.items()}
        if plan
        else {
            r"in_proj\.weight$": 0,
            r"conv1d\.(weight|bias)$": 0,
            r"x_proj\.weight$": 1,
            r"dt_proj\.(weight|bias)$": 0,
            r"A_log$": 0,
            r"mixer\.D$": 0,
            r"out_proj\.weight$": 1,
        }
    )
    fsdp = layout.dp_shard * layout.cp
    at = coords.get("dp_shard", 0) * layout.cp + coords.get("cp", 0)
    total = 0
    for name, p in model.named_parameters():
        layer = re.search(r"layers\.(\d+)\.", name)
        if layer:
            if not lo <= int(layer.group(1)) < hi:
                continue
        elif not (lo == 0 if "embed" in name else hi == n_layers):
            continue  # embeddings live on the first stage, the final norm and head on the last
        shape = list(p.shape)
        for pattern, dim in split.items():
            if layer and re.search(pattern, name):
                shape[dim] //= layout.tp
        rows = torch.arange(shape[0]).chunk(fsdp)
        shape[0] = len(rows[at]) if at < len(rows) else 0
        total += int(torch.Size(shape).numel())
    return total


def _coordinates(layout: Layout, rank: int) -> tuple[list[str], list[int]]:
    dims = layout.mesh_dims()
    names, coords = [n for n, _ in dims], []
    for _, size in reversed(dims):
        coords.append(rank % size)
        rank //= size
    return names, list(reversed(coords))


def run_layouts(
    out_dir: Path, family: str, texts: list[str], schedule: str, checkpoint: bool = False
) -> dict:
    """Layout text -> each rank's results (``checkpoint``: every block's activations
    checkpointed)."""
    out = str(out_dir / f"{family}-{schedule}")
    spawn(_worker, (free_port(), family, texts, schedule, out, checkpoint), 4)
    per_rank = [torch.load(f"{out}.{r}", weights_only=False) for r in range(4)]
    return {text: [ranks[text] for ranks in per_rank] for text in texts}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Per family: the single-process losses and every layout's results (run once)."""
    out = tmp_path_factory.mktemp("hybrid")
    return {
        family: {
            "reference": train(family, Layout(), 0, "1f1b")["losses"],
            "layouts": run_layouts(out, family, list(LAYOUTS), "1f1b"),
        }
        for family in ("transformer", "mamba")
    }


@pytest.mark.slow
@pytest.mark.parametrize("text", list(LAYOUTS))
@pytest.mark.parametrize("family", ["transformer", "mamba"])
def test_layout_matches_single_process(measured: dict, family: str, text: str):
    layout = Layout.parse(text)
    reference = measured[family]["reference"]
    ranks = measured[family]["layouts"][text]
    counting = [r for r in ranks if r["counts"]]
    assert len(counting) == layout.dp  # one rank per data-parallel part counts its tokens
    total = [sum(r["losses"][s] for r in counting) for s in range(STEPS)]
    torch.testing.assert_close(total, reference, rtol=1e-4, atol=1e-4)
    # steps 2 and 3 follow SGD updates: a wrong gradient (lost, doubled, unreduced) shows there
    for rank, result in enumerate(ranks):
        assert result["params"] == expected_params(family, layout, rank), f"rank {rank}"
    calls = set().union(*(r["calls"] for r in ranks))
    assert LAYOUTS[text] <= calls, sorted(calls)


@pytest.mark.slow
def test_gpipe_schedule_matches_single_process(measured: dict, tmp_path: Path):
    text = "dpr1-dps1-tp1-pp4-cp1"
    ranks = run_layouts(tmp_path, "transformer", [text], "gpipe")[text]
    total = next(r["losses"] for r in ranks if r["counts"])
    torch.testing.assert_close(total, measured["transformer"]["reference"], rtol=1e-4, atol=1e-4)


def shard_gradient_bytes(family: str, fsdp: int) -> int:
    """The bytes of one rank's float32 gradient shard under FSDP2 over ``fsdp`` ranks: every
    parameter's dim 0 padded to a multiple of ``fsdp`` and split (what a reduce-scatter
    outputs), summed over the model (the whole model: no tp, no pp)."""
    model = FAMILIES[family].build("tiny", vocab_size=None, kernel="auto")
    total = 0
    for p in model.parameters():
        rows = -(-p.shape[0] // fsdp)
        total += rows * (p.numel() // p.shape[0]) * 4
    return total


#: HSDP layouts: replicas of FSDP2 shards over dp_shard, or over the context-parallel ranks
HSDP = {
    "dpr2-dps2-tp1-pp1-cp1": {("dp_replicate", "all_reduce"), ("dp_shard", "reduce_scatter")},
    "dpr2-dps1-tp1-pp1-cp2": {("dp_replicate", "all_reduce"), ("cp", "reduce_scatter")},
}


@pytest.mark.slow
def test_hsdp_matches_single_process_and_records_replicate_all_reduce(tmp_path: Path):
    """HSDP (2 replicas × 2 shards) trains as one process does, each rank holds its dp_shard
    shard, and every step records the replicas' all-reduce on dp_replicate with the bytes of
    the gradient shard, once per reduce-scatter: per microbatch (no pipeline here)."""
    family = "transformer"
    reference = train(family, Layout(), 0, "1f1b")["losses"]
    results = run_layouts(tmp_path, family, list(HSDP), "1f1b")
    for text, ranks in results.items():
        layout = Layout.parse(text)
        counting = [r for r in ranks if r["counts"]]
        assert len(counting) == layout.dp
        total = [sum(r["losses"][s] for r in counting) for s in range(STEPS)]
        torch.testing.assert_close(total, reference, rtol=1e-4, atol=1e-4, msg=text)
        for rank, result in enumerate(ranks):
            assert result["params"] == expected_params(family, layout, rank), f"{text} {rank}"
        assert HSDP[text] <= set().union(*(r["calls"] for r in ranks)), text
        microbatches = DATA["global_batch"] // (layout.dp * DATA["micro_batch"])
        shard = shard_gradient_bytes(family, layout.dp_shard * layout.cp)
        for result in ranks:
            assert result["replicated"] == [microbatches * shard] * STEPS, text


def assert_layouts_match(family: str, results: dict) -> None:
    """Each layout's summed losses equal one process's, and each rank holds its parameters."""
    reference = train(family, Layout(), 0, "1f1b")["losses"]
    for text, ranks in results.items():
        layout = Layout.parse(text)
        total = [sum(r["losses"][s] for r in ranks if r["counts"]) for s in range(STEPS)]
        torch.testing.assert_close(total, reference, rtol=1e-4, atol=1e-4, msg=text)
        for rank, result in enumerate(ranks):
            assert result["params"] == expected_params(family, layout, rank), f"{text} {rank}"


@pytest.mark.slow
def test_interleaved_1f1b_matches_single_process(tmp_path: Path):
    """Two stages per rank (4 in all over the tiny Transformer's 4 blocks), beside FSDP."""
    texts = ["dpr1-dps2-tp1-pp2-cp1"]
    results = run_layouts(tmp_path, "transformer", texts, "interleaved-1f1b")
    assert_layouts_match("transformer", results)
    assert {("pp", "send"), ("pp", "recv")} <= set().union(*(r["calls"] for r in results[texts[0]]))


@pytest.mark.slow
def test_activation_checkpointing_matches_single_process(tmp_path: Path):
    """Every block checkpointed under tensor parallelism beside FSDP, and under a pipeline."""
    texts = ["dpr1-dps2-tp2-pp1-cp1", "dpr1-dps1-tp2-pp2-cp1"]
    assert_layouts_match("transformer", run_layouts(tmp_path, "transformer", texts, "1f1b", True))


@pytest.mark.slow
def test_mamba2_context_parallel_layout_matches_single_process(tmp_path: Path):
    """Mamba-2's context-parallel scan under the hybrid strategy, with FSDP over dp_shard × cp
    (its tensor-parallel split needs two groups, which no preset has: test_mamba2_tp.py)."""
    text = "dpr1-dps2-tp1-pp1-cp2"
    ranks = run_layouts(tmp_path, "mamba2", [text], "1f1b")[text]
    reference = train("mamba2", Layout(), 0, "1f1b")["losses"]
    counting = [r for r in ranks if r["counts"]]
    total = [sum(r["losses"][s] for r in counting) for s in range(STEPS)]
    torch.testing.assert_close(total, reference, rtol=1e-4, atol=1e-4)
    for rank, result in enumerate(ranks):
        assert result["params"] == expected_params("mamba2", Layout.parse(text), rank)
    assert LAYOUTS[text] <= set().union(*(r["calls"] for r in ranks))
