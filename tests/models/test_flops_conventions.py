"""Model FLOPs under the two conventions (`greenbench.vocabulary.flops`): PaLM's full count
against FlopCounterMode over explicit-matmul attention, and the causal count of packed rows
against the full count scaled by the query–key pairs a document-causal mask keeps."""

from __future__ import annotations

import pytest
import torch

from greenbench.data.batches import StepBatch, collate_microbatch
from greenbench.errors import SpecError
from greenbench.models import FAMILIES, build_model, model_info
from greenbench.models.causal import causal_flops_per_token, causal_fraction
from greenbench.models.flops import flops_per_token, measured_flops_per_token
from greenbench.sources.builtin import batch_causal_flops, batch_flops

#: packed rows of one microbatch (width 16): three documents, one filling its row, two and padding
ROWS = ((5, 7, 4), (16,), (3, 9))
WIDTH = 16


def kept_pairs(doc_lengths: tuple[int, ...], width: int) -> int:
    """Query–key pairs a document-causal mask over a row keeps, counted from the mask itself:
    key at or before the query, both in the same document (padding is in none)."""
    doc = torch.full((width,), -1)
    at = 0
    for i, n in enumerate(doc_lengths):
        doc[at : at + n] = i
        at += n
    same = (doc[:, None] == doc[None, :]) & (doc[:, None] >= 0)
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    return int((same & causal).sum())


def packed_batch(rows: tuple[tuple[int, ...], ...]) -> StepBatch:
    mb = collate_microbatch([[torch.arange(1, n + 1) for n in row] for row in rows])
    return StepBatch(microbatches=(mb,), global_tokens=mb.n_tokens, cost=0.0)


def test_the_full_count_is_what_flop_counter_mode_counts_over_explicit_matmul_attention():
    """FlopCounterMode counts no SDPA FLOPs on CPU and never discounts causality: over eager
    attention (explicit score and weighted-sum matmuls over the whole S × S, masked after) it
    counts PaLM's attention term exactly, and the whole count within the norms' weights."""
    info = model_info("transformer", "tiny")
    seq = 32
    ids = torch.randint(0, info.vocab_size, (2, seq))
    model = build_model("transformer", "tiny", seed=0)
    with_sdpa = measured_flops_per_token(model, {"input_ids": ids, "labels": ids})
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    with_matmuls = measured_flops_per_token(model, {"input_ids": ids, "labels": ids})
    attention = FAMILIES["transformer"].attention_flops_per_token(info, seq)
    assert attention == 12 * info.n_layers * info.d_model * seq
    assert with_matmuls - with_sdpa == attention  # the scores and the weighted sum, exactly
    assert with_matmuls == pytest.approx(flops_per_token(info, seq), rel=0.001)


def test_causal_fraction_is_the_pairs_a_document_causal_mask_keeps():
    for row in (*ROWS, (1,), (1, 1, 1)):
        assert causal_fraction(row, WIDTH) == kept_pairs(row, WIDTH) / WIDTH**2
    assert causal_fraction((16,), 16) == 136 / 256  # one document: 1/2 + 1/(2·S)
    assert causal_fraction((4, 4, 4, 4), 16) == 40 / 256  # four: a quarter of that
    with pytest.raises(SpecError, match="do not fit"):
        causal_fraction((10, 7), 16)
    with pytest.raises(SpecError, match="width"):
        causal_fraction((), 0)


def test_the_causal_count_scales_the_attention_part_by_each_rows_documents():
    info = model_info("transformer", "tiny")
    batch = packed_batch(ROWS)
    (mb,) = batch.microbatches
    assert mb.input_ids.shape == (3, WIDTH) and mb.doc_lengths == ROWS
    attention = FAMILIES["transformer"].attention_flops_per_token(info, WIDTH)
    rest = flops_per_token(info, WIDTH) - attention  # 6·N: no causal discount
    full, causal = batch_flops(info, batch), batch_causal_flops(info, batch)
    tokens = [sum(n - 1 for n in row) for row in ROWS]  # real label tokens per row
    assert sum(tokens) == mb.n_tokens
    assert full == pytest.approx(sum(t * (rest + attention) for t in tokens))
    # per row: the full count's attention part × Σ len·(len+1)/2 ÷ S², everything else as is
    pairs = [kept_pairs(row, WIDTH) for row in ROWS]
    scaled = [t * attention * p / WIDTH**2 for t, p in zip(tokens, pairs, strict=True)]
    assert causal == pytest.approx(sum(t * rest for t in tokens) + sum(scaled))
    assert full - causal == pytest.approx(sum(t * attention for t in tokens) - sum(scaled))
    assert causal < full


@pytest.mark.parametrize("family", ["mamba", "mamba2"])
def test_a_scan_has_no_causal_discount(family: str):
    info = model_info(family, "tiny")
    assert FAMILIES[family].attention_flops_per_token(info, WIDTH) == 0.0
    batch = packed_batch(ROWS)
    assert batch_causal_flops(info, batch) == pytest.approx(batch_flops(info, batch))
    assert causal_flops_per_token(info, WIDTH, (5, 7, 4)) == flops_per_token(info, WIDTH)


def test_a_microbatch_without_its_documents_has_no_causal_count():
    info = model_info("transformer", "tiny")
    mb = collate_microbatch([[torch.arange(1, 9)]])
    bare = StepBatch(
        microbatches=(type(mb)(mb.input_ids, mb.labels, mb.position_ids, mb.n_tokens, 1),),
        global_tokens=mb.n_tokens,
        cost=0.0,
    )
    assert batch_causal_flops(info, bare) is None
    assert batch_flops(info, bare) > 0
