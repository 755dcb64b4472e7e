"""Context parallelism computes what one process computes on the whole sequence.

Real gloo processes each run one chunk of the same rows (`split_sequence`, in the family's
layout: zigzag for the Transformer's ring, contiguous for the Mamba scan; the ring also in the
contiguous one) through a model switched to its CP form (ring attention / the chunked Mamba
scan); the per-rank sums of token
losses and every parameter gradient of the loss normalised by the whole batch's tokens, summed
over the ranks, are compared with a single process running the whole rows. Float32 throughout;
tolerance rtol 1e-4, atol 1e-5 on gradients, rtol 1e-5 on the summed loss (float reordering in
the log-sum-exp merge and the scan correction stays near 1e-6 relative).
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import free_port, spawn
from transformers import LlamaForCausalLM

from greenbench.data.batches import collate_microbatch
from greenbench.distributed.comm import CommRecorder
from greenbench.distributed.context_parallel import chunk_pieces, split_sequence
from greenbench.models import build_model
from greenbench.models import family as model_family
from greenbench.models.card import CPForm
from greenbench.models.transformer.context_parallel import block_plan, ring_work
from greenbench.models.transformer.model import make_config

VOCAB = 128
SEQ = 64
ROWS = 2
RTOL, ATOL = 1e-4, 1e-5


#: Mamba-2's SSD chunk in these tests: several per rank, not aligned with the ranks' chunks of
#: the sequence (the last one padded), so the scan's own chunk chain and padding run under CP
MAMBA2_CHUNK = 12


def make_model(family: str, kv_heads: int | None) -> torch.nn.Module:
    if family == "mamba2":
        model = build_model(family, "tiny", seed=0, vocab_size=VOCAB)
        for layer in model.backbone.layers:
            layer.mixer.chunk_size = MAMBA2_CHUNK
        return model
    if kv_heads is None:
        return build_model(family, "tiny", seed=0, vocab_size=VOCAB)
    config = make_config("tiny", vocab_size=VOCAB)
    config.num_key_value_heads = kv_heads  # grouped-query attention
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def make_batch(packed: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input ids, labels, position ids), (ROWS, SEQ). Packed: documents of several lengths,
    one crossing every chunk boundary, the second row padded at the end."""
    gen = torch.Generator().manual_seed(1)
    if not packed:
        ids = torch.randint(1, VOCAB, (ROWS, SEQ), generator=gen)
        return ids, ids.clone(), torch.arange(SEQ).expand(ROWS, SEQ).contiguous()
    lengths = [(20, 30, 14), (9, 31, 10)]  # 64 and 50 tokens: the second row is padded
    rows = [[torch.randint(1, VOCAB, (n,), generator=gen) for n in row] for row in lengths]
    mb = collate_microbatch(rows)
    assert mb.input_ids.shape == (ROWS, SEQ)
    return mb.input_ids, mb.labels, mb.position_ids


def n_tokens(labels: torch.Tensor) -> int:
    """Real label tokens of the whole rows (the loss's normaliser)."""
    return int((labels[:, 1:] != -100).sum())


def reference(family: str, kv_heads: int | None, packed: bool) -> dict[str, torch.Tensor]:
    """One process, whole rows: summed token loss (logits at t vs labels at t + 1), and the
    gradients of the mean token loss."""
    model = make_model(family, kv_heads)
    ids, labels, pos = make_batch(packed)
    kwargs = {"position_ids": pos} if family == "transformer" else {}
    logits = model(input_ids=ids, **kwargs).logits
    loss = F.cross_entropy(
        logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100, reduction="sum"
    )
    (loss / n_tokens(labels)).backward()
    out = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    out["loss"] = loss.detach()
    return out


def _worker(rank: int, world: int, port: int, case: tuple, out: str) -> None:
    import torch.distributed as dist

    family, kv_heads, packed, layout = case
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        comm = CommRecorder()
        model = make_model(family, kv_heads)
        card = model_family(family)
        form = CPForm("own", layout or card.cp_layout, "")
        card.enable_context_parallel(model, dist.group.WORLD, comm, form=form)
        ids, labels, pos = split_sequence(*make_batch(packed), rank, world, form.layout)
        kwargs = {"position_ids": pos} if family == "transformer" else {}
        logits = model(input_ids=ids, **kwargs).logits
        loss = F.cross_entropy(  # the labels are shifted already: no further shift
            logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum"
        )
        # normalised by the whole batch's tokens, as the strategies do (base.py)
        (loss / n_tokens(make_batch(packed)[1])).backward()
        calls = [(c.dim, c.op, c.nbytes) for c in comm.take()]
        result = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
        result["loss"] = loss.detach().clone()
        for tensor in result.values():
            dist.all_reduce(tensor)  # every reduction over cp ranks sums
        result["calls"] = calls
        result["shape"] = tuple(ids.shape)
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


@functools.cache
def run_cp(
    family: str,
    cp: int,
    kv_heads: int | None = None,
    packed: bool = False,
    layout: str | None = None,
) -> dict:
    """One CP run; ``layout`` None: the family's own (its card's ``cp_layout``)."""
    out = Path(tempfile.mkdtemp()) / "result.pt"
    case = (family, kv_heads, packed, layout)
    spawn(_worker, (cp, free_port(), case, str(out)), cp)
    return torch.load(out)


def assert_matches(got: dict, family: str, kv_heads: int | None = None, packed: bool = False):
    want = reference(family, kv_heads, packed)
    torch.testing.assert_close(got["loss"], want["loss"], rtol=1e-5, atol=1e-5)
    for name, grad in want.items():
        if name != "loss":
            torch.testing.assert_close(got[name], grad, rtol=RTOL, atol=ATOL, msg=name)


# -- the sequence split (no processes) ---------------------------------------------------------


def test_split_sequence_shifts_labels_over_the_whole_row():
    ids = torch.arange(16).view(2, 8)
    labels = ids + 100
    pos = torch.arange(8).expand(2, 8)
    chunks = [split_sequence(ids, labels, pos, r, 4) for r in range(4)]
    assert [c[0].shape for c in chunks] == [(2, 2)] * 4
    torch.testing.assert_close(torch.cat([c[0] for c in chunks], 1), ids)
    torch.testing.assert_close(torch.cat([c[2] for c in chunks], 1), pos)
    shifted = torch.cat([c[1] for c in chunks], 1)
    # a chunk's last token is scored against the next chunk's first label
    assert chunks[0][1][0, -1] == labels[0, 2]
    torch.testing.assert_close(shifted[:, :-1], labels[:, 1:])
    assert (shifted[:, -1] == -100).all()


def test_split_sequence_needs_a_divisible_length():
    ids = torch.zeros(1, 10, dtype=torch.long)
    with pytest.raises(ValueError, match="divisible"):
        split_sequence(ids, ids, ids, 0, 4)
    with pytest.raises(ValueError, match="cp_rank"):
        split_sequence(ids, ids, ids, 2, 2)
    with pytest.raises(ValueError, match="divisible"):  # zigzag: 2·cp runs
        split_sequence(ids, ids, ids, 0, 2, "zigzag")


def test_zigzag_gives_rank_r_runs_r_and_its_mirror_and_keeps_every_label():
    ids = torch.arange(16).view(2, 8)
    labels = ids + 100
    pos = torch.arange(8).expand(2, 8)
    chunks = [split_sequence(ids, labels, pos, r, 2, "zigzag") for r in range(2)]
    # 4 runs of 2: rank 0 holds runs 0 and 3, rank 1 runs 1 and 2
    assert chunks[0][0][0].tolist() == [0, 1, 6, 7]
    assert chunks[1][0][0].tolist() == [2, 3, 4, 5]
    assert chunks[0][2][0].tolist() == [0, 1, 6, 7]  # positions travel with their tokens
    # labels shifted over the whole row first: each token keeps its next token's label, and
    # the ranks' labels are the row's, each once
    assert chunks[0][1][0].tolist() == [101, 102, 107, -100]
    assert chunks[1][1][0].tolist() == [103, 104, 105, 106]
    assert chunk_pieces(1, 4, 16, "zigzag") == ((2, 4), (12, 14))


# -- load balance: the ring's causal work, counted with the plan the ring computes by -------


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_zigzag_gives_every_rank_equal_causal_work(cp: int):
    tokens = 2 * cp * 4
    work = [ring_work(r, cp, tokens, "zigzag") for r in range(cp)]
    assert work == [2 * cp + 1] * cp
    # together they are every live (query block, key block) pair of the row, each once
    assert sum(work) == 2 * cp * (2 * cp + 1) // 2


@pytest.mark.parametrize("cp", [2, 4])
def test_a_contiguous_split_is_uneven(cp: int):
    work = [ring_work(r, cp, 2 * cp * 4, "contiguous") for r in range(cp)]
    assert work == [4 * r + 3 for r in range(cp)]  # the last rank does 2·cp − 1 times the first
    assert len(set(work)) == cp


def test_the_ring_skips_what_the_mask_hides():
    # zigzag, cp=2, runs of 4: rank 0 holds rows 0-3 and 12-15, rank 1 rows 4-7 and 8-11
    mine, theirs = ((0, 4), (12, 16)), ((4, 8), (8, 12))
    plan = block_plan(mine, theirs)  # rank 0 meeting rank 1's chunk: the tail run's queries
    assert plan is not None and plan.rows == slice(4, 8) and plan.cols == slice(0, 8)
    plan = block_plan(theirs, mine)  # rank 1 meeting rank 0's: every query, the head run
    assert plan is not None and plan.rows == slice(0, 8) and plan.cols == slice(0, 4)
    assert block_plan(((0, 4),), ((4, 8),)) is None  # contiguous: a later chunk is skipped


# -- equivalence with one process --------------------------------------------------------------


def test_transformer_packed_rows_gqa_cp2_match_one_process():
    got = run_cp("transformer", 2, kv_heads=2, packed=True)
    assert got["shape"] == (ROWS, SEQ // 2)
    assert_matches(got, "transformer", kv_heads=2, packed=True)


def test_transformer_contiguous_ring_still_matches_one_process():
    got = run_cp("transformer", 2, kv_heads=2, packed=True, layout="contiguous")
    assert_matches(got, "transformer", kv_heads=2, packed=True)


def test_mamba_cp2_matches_one_process():
    assert_matches(run_cp("mamba", 2), "mamba")


def test_mamba2_cp2_matches_one_process():
    assert_matches(run_cp("mamba2", 2), "mamba2")


def test_mamba2_cp4_matches_one_process():
    assert_matches(run_cp("mamba2", 4), "mamba2")


@pytest.mark.slow
def test_transformer_cp4_matches_one_process():
    assert_matches(run_cp("transformer", 4), "transformer")


@pytest.mark.slow
def test_transformer_packed_cp4_matches_one_process():
    assert_matches(run_cp("transformer", 4, packed=True), "transformer", packed=True)


@pytest.mark.parametrize("family", ["mamba", "mamba2"])
def test_mamba_refuses_a_zigzag_split(family: str):
    with pytest.raises(ValueError, match="contiguous"):
        model_family(family).enable_context_parallel(
            None, None, None, form=CPForm("own", "zigzag", "")
        )


@pytest.mark.slow
def test_mamba_cp4_matches_one_process():
    assert_matches(run_cp("mamba", 4), "mamba")


# -- communication records ---------------------------------------------------------------------


def test_ring_exchanges_are_recorded_on_cp():
    calls = run_cp("transformer", 2, kv_heads=2, packed=True)["calls"]
    assert calls and all(dim == "cp" for dim, _, _ in calls)
    layers, kv_heads, head_dim, tokens = 4, 2, 32, SEQ // 2
    kv = 2 * ROWS * kv_heads * tokens * head_dim * 4  # K and V of the KV heads only, float32
    kv_msg = kv + ROWS * tokens * 8  # + the chunk's document keys (int64)
    sends = [n for _, op, n in calls if op == "send"]
    recvs = [n for _, op, n in calls if op == "recv"]
    # per layer: forward one (K, V) exchange; backward one (K, V) and two (dK, dV)
    assert sorted(sends) == sorted(recvs)
    assert sends.count(kv_msg) == 2 * layers
    assert sends.count(kv) == 2 * layers
    assert len(sends) == 4 * layers


def test_mamba_halo_and_state_are_recorded_on_cp():
    calls = run_cp("mamba", 2)["calls"]  # rank 0: sends forward, receives backward
    layers, d_inner, states = 8, 512, 16
    halo = 3 * ROWS * d_inner * 4
    state = ROWS * d_inner * states * 4
    assert all(dim == "cp" for dim, _, _ in calls)
    assert sorted(n for _, op, n in calls if op == "send") == sorted([halo, state] * layers)
    assert sorted(n for _, op, n in calls if op == "recv") == sorted([halo, state] * layers)


def test_mamba2_halo_and_state_are_recorded_on_cp():
    calls = run_cp("mamba2", 2)["calls"]  # rank 0: sends forward, receives backward
    layers, d_inner, groups, states, heads, head_dim = 8, 512, 1, 64, 8, 64
    halo = 3 * ROWS * (d_inner + 2 * groups * states) * 4  # x, B and C of the last 3 tokens
    state = ROWS * heads * head_dim * states * 4
    assert all(dim == "cp" for dim, _, _ in calls)
    assert sorted(n for _, op, n in calls if op == "send") == sorted([halo, state] * layers)
    assert sorted(n for _, op, n in calls if op == "recv") == sorted([halo, state] * layers)
