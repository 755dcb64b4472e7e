"""A fault-tolerant run told from its ranks' ledgers: which steps count, which were redone, what
the failure, the restart and the checkpoints cost (hand-built ledgers, figures by hand)."""

from __future__ import annotations

import pytest

from greenbench.rank.ledger import Ledger, combined_window, read_ledger, summarize, useful_steps


def window(seconds: float, joules: float | None) -> dict:
    return {"source": "estimate", "measured": False, "seconds": seconds, "energy_j": joules,
            "energy_gpu_j": None, "energy_cpu_j": joules, "energy_dram_j": None,
            "samples": [], "note": ""}  # fmt: skip


def step(attempt: int, k: int, t0: float, tokens: int = 10) -> dict:
    return {"kind": "step", "attempt": attempt, "step": k, "t0": t0, "seconds": 1.0,
            "energy": window(1.0, 2.0), "tokens": tokens}  # fmt: skip


def ledger(rank: int) -> list[dict]:
    """Steps 0-2 in attempt 0 (a checkpoint after 2 steps, 0.5 s, 3 J), rank 1 killed before
    step 3 at t=104; restarted ranks begin at t=110, load, and train steps 2-3 from t=112."""
    records = [step(0, 0, 100.0), step(0, 1, 101.0)]
    records.append({"kind": "checkpoint", "attempt": 0, "step": 2, "t0": 102.0,
                    "seconds": 0.5 + rank, "energy": window(0.5, 3.0), "mode": "sync"})  # fmt: skip
    if rank == 0:
        records.append({"kind": "written", "attempt": 0, "step": 2, "bytes": 1000})
    records.append(step(0, 2, 103.0))
    if rank == 1:
        records.append({"kind": "failure", "attempt": 0, "step": 3, "rank": 1, "t": 104.0})
    records.append({"kind": "restart", "attempt": 1, "t_begin": 110.0, "t_ready": 111.0 + rank,
                    "loaded": 2, "load_s": 0.25, "t_load": 110.5,
                    "load_energy": window(0.25, 1.0), "energy": window(2.0, 5.0)})  # fmt: skip
    records += [step(1, 2, 112.0), step(1, 3, 113.0)]
    return records


def test_the_last_attempt_of_a_step_counts_the_earlier_was_redone():
    kept, redone = useful_steps(ledger(0))
    assert [(r["attempt"], r["step"]) for r in kept] == [(0, 0), (0, 1), (1, 2), (1, 3)]
    assert [(r["attempt"], r["step"]) for r in redone] == [(0, 2)]


def test_the_run_is_told_from_every_rank_s_ledger():
    told = summarize({0: ledger(0), 1: ledger(1)})
    f = told.fields
    assert f["failures"] == 1
    assert f["tokens_trained"] == 2 * 5 * 10 and f["goodput"] == pytest.approx(4 / 5)
    assert f["redone_s"] == 1.0 and f["redone_j"] == 2 * 2.0
    # from the failure (t=104) to the slowest rank ready (t=112); both ranks' restart joules
    assert f["restart_s"] == 8.0 and f["restart_j"] == 2 * 5.0
    assert f["energy_lost_j"] == 4.0 + 10.0
    # one checkpoint: the slower rank's 1.5 s, both ranks' joules, rank 0's bytes
    assert (f["ckpt_count"], f["ckpt_s"], f["ckpt_j"], f["ckpt_bytes"]) == (1, 1.5, 6.0, 1000)
    kinds = [(e.kind, e.step, e.t_s) for e in told.events]
    assert kinds == [
        ("checkpoint", 2, 2.0),
        ("failure", 3, 4.0),
        ("redone", 2, 4.0),
        ("restart", 2, 4.0),
        ("load", 2, 10.5),
    ]
    restart = told.events[3]
    assert "6.00 s before the restarted ranks began" in restart.note


def test_an_unknown_window_makes_the_sum_unknown_never_zero():
    ledgers = {0: ledger(0), 1: ledger(1)}
    ledgers[1][3]["energy"] = None  # rank 1's redone step 2
    f = summarize(ledgers).fields
    assert f["redone_j"] is None and f["energy_lost_j"] is None


def test_a_rank_s_energy_is_every_segment_it_metered(tmp_path):
    path = tmp_path / "ledger-rank0.jsonl"
    out = Ledger(path)
    for record in ledger(0):
        out.write(**record)
    out.close()
    with path.open("a") as f:
        f.write('{"kind": "step", "attem')  # a line cut short by the rank's death
    records = read_ledger(path)
    assert len(records) == len(ledger(0))
    w = combined_window(records, seconds=14.0)
    # 5 steps × 2 J + checkpoint 3 J + restart 5 J, over 5 + 0.5 + 2 metered seconds of 14
    assert w.energy_j == 18.0 and w.seconds == 14.0 and not w.measured
    assert "over 7.50 s of 14.00 s; 6.50 s unmetered" in w.note
