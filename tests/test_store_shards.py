"""Result shards and damaged files, at the store: a run the database will not take (another
process holds it) goes to a shard and is merged later, never lost; merging is idempotent,
schema-checked and all-or-nothing; a truncated or corrupt file is refused untouched.

Locks are held by a real second process with a real DuckDB connection (a reader, as a dashboard,
an export or a notebook would hold one), never by a mock.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from greenbench.aggregate import aggregate_repeat
from greenbench.cli import main
from greenbench.energy.base import EnergyWindow, PowerSample
from greenbench.errors import StoreError
from greenbench.results import CommRecord, RankResult, RunOutcome
from greenbench.store import (
    SCHEMA_VERSION,
    Store,
    check_integrity,
    get_run,
    merge_pending,
    merge_shards,
    pending_shards,
    read_frame,
    shard_dir,
    write_shard,
)

READER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
con.execute("SELECT count(*) FROM runs").fetchall()
print("held", flush=True)
sys.stdin.readline()
con.close()
"""

TABLES = ("runs", "results", "rank_results", "power_samples", "comm_records")


@contextmanager
def reader_holding(db: Path) -> Iterator[subprocess.Popen]:
    """Another process holding a read-only DuckDB connection to ``db`` until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", READER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def run_row(run_id: str, **extra: Any) -> dict[str, Any]:
    """A ``runs`` row as the launcher begins one (status running)."""
    return {
        "run_id": run_id, "suite": "smoke", "workload": "transformer-vs-mamba",
        "config_name": "transformer/tiny seq=256", "model_family": "transformer",
        "config": {"workload": "transformer-vs-mamba", "settings": {"data.seq_len": 256}},
        "model_size": "tiny", "strategy": "ddp", "layout": "dp2", "device": "cpu",
        "device_type": "cpu:Test CPU", "nproc": 2, "nnodes": 1, "precision": "fp32",
        "seq_len": 256, "lengths": "fixed", "label": "main", "hardware": {"cpu": "Test CPU"},
        "versions": {"torch": "2.13.0+cpu"},
    } | extra  # fmt: skip


def make_outcome(repeats: int = 2) -> RunOutcome:
    """Two ranks per repeat, energy and power samples on rank 0, communication on both."""
    ranks = [
        RankResult(
            rank=rank, local_rank=rank, host="node-a", repeat=k, tokens=1000, seconds=2.0,
            compute_s=1.5, comm_s=0.25, wait_s=0.25, step_times_s=(0.5, 0.75, 0.5),
            peak_mem_bytes=3_000_000, flops=1.5e12, loss=2.5, n_microbatches=4,
            energy=EnergyWindow(
                "rapl", True, 2.0, 100.0, None, 100.0, None,
                (PowerSample(0.0, 50.0, "cpu0"), PowerSample(1.0, 51.5, "cpu0")), "ok",
            ) if rank == 0 else None,
            comm=(CommRecord("world", "all_reduce", 3, 4096, 0.05, 0.01),),
        )
        for k in range(repeats)
        for rank in range(2)
    ]  # fmt: skip
    results = [
        aggregate_repeat(
            [r for r in ranks if r.repeat == k],
            idle_power_w=9.5, peak_flops=1.1e11, n_devices=2, carbon_g_per_kwh=56.0,
        )
        for k in range(repeats)
    ]  # fmt: skip
    return RunOutcome(status="ok", repeats=results, ranks=ranks, peak_flops=1.1e11)


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def counts(db: Path) -> dict[str, int]:
    return {t: int(read_frame(db, f"SELECT count(*) AS n FROM {t}").n[0]) for t in TABLES}


# --------------------------------------------------------------------------- the fallback


def test_a_reader_holding_the_file_sends_the_finished_run_to_a_shard(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    waits: list[float] = []
    store = Store(db, lock_timeout_s=0.2, write_wait_s=0.5, on_wait=waits.append)
    store.begin_run(run_row("aaaaaaaaaaaa"))
    outcome = make_outcome()
    with reader_holding(db):
        shard = store.finish_run("aaaaaaaaaaaa", outcome)
        assert waits and waits == sorted(waits)  # it waited, and said so, before giving up
        assert shard == shard_dir(db) / "aaaaaaaaaaaa.duckdb" and shard.is_file()
        assert pending_shards(db) == [shard]
        assert get_run(db, "aaaaaaaaaaaa")["status"] == "running"  # the file could not change
    in_shard = get_run(shard, "aaaaaaaaaaaa")
    assert in_shard["status"] == "ok" and len(in_shard["results"]) == len(outcome.repeats)

    report = merge_pending(Store(db), timeout_s=5.0)  # as the launcher's next open does
    assert [(s.name, ids) for s, ids in report.merged] == [
        ("aaaaaaaaaaaa.duckdb", ["aaaaaaaaaaaa"])
    ]
    run = get_run(db, "aaaaaaaaaaaa")
    assert run["status"] == "ok" and run["finished_at"] is not None
    assert [r["repeat"] for r in run["results"]] == [r.repeat for r in outcome.repeats]
    assert len(run["rank_results"]) == len(outcome.ranks)
    assert len(run["comm_records"]) == len(outcome.ranks)
    n_samples = sum(len(r.energy.samples) for r in outcome.ranks if r.energy is not None)
    assert counts(db) == {
        "runs": 1, "results": 2, "rank_results": 4, "power_samples": n_samples,
        "comm_records": 4,
    }  # fmt: skip
    assert pending_shards(db) == [] and check_integrity(db) == []


def test_a_run_begun_on_a_locked_file_still_trains_and_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    store = Store(db, lock_timeout_s=0.2, write_wait_s=0.2)
    with reader_holding(db):
        assert store.begin_run(run_row("aaaaaaaaaaaa")) is False  # deferred, not refused
        assert store.begin_run(run_row("bbbbbbbbbbbb")) is False
        assert store.begin_run(run_row("cccccccccccc")) is False
        assert shard_dir(db).is_dir()  # the run has somewhere to go before it trains
        assert store.mark_run("cccccccccccc", "interrupted", "Ctrl-C") is not None
    # the lock is gone by the time this run finishes: its row and results go to the file
    assert store.finish_run("aaaaaaaaaaaa", make_outcome()) is None
    assert get_run(db, "aaaaaaaaaaaa")["status"] == "ok"
    with reader_holding(db):
        assert store.finish_run("bbbbbbbbbbbb", make_outcome()) is not None
    report = merge_shards(db)
    assert sorted(ids[0] for _, ids in report.merged) == ["bbbbbbbbbbbb", "cccccccccccc"]
    assert report.left == []
    assert get_run(db, "bbbbbbbbbbbb")["status"] == "ok"
    interrupted = get_run(db, "cccccccccccc")
    assert (interrupted["status"], interrupted["error"]) == ("interrupted", "Ctrl-C")
    assert check_integrity(db) == [] and pending_shards(db) == []


def test_no_run_starts_without_a_place_for_its_result(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    store = Store(db, lock_timeout_s=0.2)
    shard_dir(db).write_text("a file where the shard folder would go")
    with reader_holding(db), pytest.raises(StoreError, match="shard folder"):
        store.begin_run(run_row("aaaaaaaaaaaa"))


# --------------------------------------------------------------------------- merging


def test_merging_twice_adds_nothing(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    Store(db)
    shard = write_shard(db, {**run_row("aaaaaaaaaaaa"), "status": "running"},
                        outcome=make_outcome())  # fmt: skip
    copy = tmp_path / "copy.duckdb"
    shutil.copyfile(shard, copy)
    assert [ids for _, ids in merge_shards(db).merged] == [["aaaaaaaaaaaa"]]
    once = counts(db)
    assert once["runs"] == 1 and all(once.values())
    shutil.copyfile(copy, shard)  # the same shard again (a job retried, a copy restored)
    assert [ids for _, ids in merge_shards(db).merged] == [["aaaaaaaaaaaa"]]
    assert counts(db) == once and check_integrity(db) == []
    result = CliRunner().invoke(main, ["merge", "--db", str(db)])
    assert result.exit_code == 0 and "no shards to merge" in result.stdout


def test_a_shard_of_an_older_schema_is_migrated_then_merged(tmp_path: Path) -> None:
    from importlib import resources

    db = tmp_path / "g.duckdb"
    Store(db)
    folder = shard_dir(db)
    folder.mkdir()
    old = folder / "aaaaaaaaaaaa.duckdb"
    con = duckdb.connect(str(old))
    con.execute(resources.files("greenbench").joinpath("store_schema.sql").read_text())
    con.execute("INSERT INTO schema_version VALUES (1, now())")
    row = run_row("aaaaaaaaaaaa", status="ok", config_key="0" * 16, started_at="2026-11-01")
    for col in ("config", "hardware", "versions"):
        row[col] = json.dumps(row[col])
    cols = sorted(row)
    con.execute(
        f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
        [row[c] for c in cols],
    )
    con.close()
    report = merge_shards(db)
    assert [ids for _, ids in report.merged] == [["aaaaaaaaaaaa"]] and report.left == []
    run = get_run(db, "aaaaaaaaaaaa")
    assert run["status"] == "ok" and run["dp_replicate"] == 1  # columns of later versions
    assert run["git_branch"] is None  # stored before branches were kept: unknown
    assert not old.exists()


def test_a_run_s_git_branch_goes_through_its_shard(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    store = Store(db, lock_timeout_s=0.2, write_wait_s=0.2)
    store.begin_run(run_row("aaaaaaaaaaaa", git_sha="abc123", git_branch="feature/x"))
    with reader_holding(db):
        assert store.finish_run("aaaaaaaaaaaa", make_outcome()) is not None
    write_shard(db, {**run_row("bbbbbbbbbbbb", git_branch="main"), "status": "running"},
                outcome=make_outcome())  # fmt: skip
    assert sorted(ids[0] for _, ids in merge_shards(db).merged) == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    first, second = get_run(db, "aaaaaaaaaaaa"), get_run(db, "bbbbbbbbbbbb")
    assert (first["status"], first["git_sha"], first["git_branch"]) == ("ok", "abc123", "feature/x")
    assert (second["status"], second["git_branch"]) == ("ok", "main")


def test_newer_damaged_and_inconsistent_shards_are_reported_and_left(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    store = Store(db)
    store.begin_run(run_row("0000000000ff"))
    store.finish_run("0000000000ff", make_outcome())
    before = counts(db)

    def shard_of(run_id: str) -> Path:
        return write_shard(db, {**run_row(run_id), "status": "running"},
                           outcome=make_outcome())  # fmt: skip

    newer = shard_of("aaaaaaaaaaaa")
    con = duckdb.connect(str(newer))
    con.execute("INSERT INTO schema_version VALUES (?, now())", [SCHEMA_VERSION + 1])
    con.close()
    damaged = shard_of("bbbbbbbbbbbb")  # a copy cut short
    with damaged.open("r+b") as f:
        f.truncate(damaged.stat().st_size // 2)
    orphans = shard_of("cccccccccccc")  # results of a run the shard does not hold
    con = duckdb.connect(str(orphans))
    con.execute("UPDATE results SET run_id = 'dddddddddddd' WHERE repeat = 1")
    con.close()
    good = shard_of("eeeeeeeeeeee")
    kept = {p: snapshot(p) for p in (newer, damaged, orphans)}

    result = CliRunner().invoke(main, ["merge", "--db", str(db)])
    assert result.exit_code == 1
    assert "merged shard eeeeeeeeeeee.duckdb" in result.stdout
    left = result.stderr.strip().splitlines()
    assert len(left) == 3 and all(line.startswith("left shard ") for line in left)
    reasons = dict(zip(sorted(kept), sorted(left), strict=True))
    assert "newer than this greenbench" in reasons[newer]
    assert "is damaged" in reasons[damaged]
    assert "belong to no run of the shard" in reasons[orphans]
    assert pending_shards(db) == sorted(kept)  # left in place, untouched
    assert {p: snapshot(p) for p in kept} == kept
    assert not good.exists()  # merged, then deleted
    # only the good shard's run arrived: nothing of the others, not even of the orphans' run
    assert counts(db)["runs"] == before["runs"] + 1
    assert get_run(db, "eeeeeeeeeeee")["status"] == "ok"
    for run_id in ("aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd"):
        with pytest.raises(StoreError, match="no run"):
            get_run(db, run_id)
    assert check_integrity(db) == []


def test_a_truncated_and_a_newer_shard_are_refused_and_the_database_is_untouched(
    tmp_path: Path,
) -> None:
    """What a cluster job's shards can go through (a copy cut short, a node running a newer
    greenbench): one line each, the shards left, the database's file not changed at all."""
    db = tmp_path / "g.duckdb"
    store = Store(db)
    store.begin_run(run_row("0000000000ff"))
    store.finish_run("0000000000ff", make_outcome())
    truncated = write_shard(db, run_row("aaaaaaaaaaaa"), outcome=make_outcome())
    with truncated.open("r+b") as f:
        f.truncate(truncated.stat().st_size // 3)
    newer = write_shard(db, run_row("bbbbbbbbbbbb"), outcome=make_outcome())
    con = duckdb.connect(str(newer))
    con.execute("INSERT INTO schema_version VALUES (?, now())", [SCHEMA_VERSION + 1])
    con.close()
    before = snapshot(db)
    kept = {p: snapshot(p) for p in (truncated, newer)}

    result = CliRunner().invoke(main, ["merge", "--db", str(db)])
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"left shard {truncated} in place: ") and "damaged" in lines[0]
    assert lines[1].startswith(f"left shard {newer} in place: ") and "newer" in lines[1]
    assert snapshot(db) == before
    assert {p: snapshot(p) for p in kept} == kept


# --------------------------------------------------------------------------- stale shards

#: a run's state: its status and how many repeats (result rows) it holds
State = tuple[str, int]


def store_state(db: Path, run_id: str, state: State) -> None:
    """Put ``run_id`` in the database at ``state``, through the launcher's Store."""
    status, repeats = state
    store = Store(db)
    store.begin_run(run_row(run_id))
    if repeats:
        store.finish_run(run_id, replace(make_outcome(repeats), status=status))
    elif status != "running":
        store.mark_run(run_id, status, f"stored {status}")


def shard_state(db: Path, run_id: str, state: State) -> Path:
    """A real shard of ``run_id`` at ``state``, as ``write_shard`` writes one."""
    status, repeats = state
    if repeats:
        outcome = replace(make_outcome(repeats), status=status)
        return write_shard(db, run_row(run_id), outcome=outcome)
    if status == "running":
        return write_shard(db, run_row(run_id))  # a run begun, never closed
    return write_shard(db, run_row(run_id), status=status, error=f"shard {status}")


def state_of(db: Path, run_id: str) -> State:
    run = get_run(db, run_id)
    return run["status"], len(run["results"])


@pytest.mark.parametrize(
    ("stored", "shard"),
    [
        (("running", 0), ("ok", 2)),  # finished while another process held the file
        (("running", 0), ("interrupted", 0)),
        (("running", 0), ("running", 0)),
        (("failed", 0), ("ok", 2)),  # collected as failed, then its job's shard arrived
        (("interrupted", 0), ("ok", 2)),
        (("failed", 0), ("interrupted", 0)),  # the job's own account of how it ended
        (("skipped", 0), ("failed", 0)),
        (("ok", 1), ("ok", 2)),
        (("ok", 2), ("ok", 2)),  # the same run again
        (("failed", 2), ("ok", 2)),
    ],
)
def test_a_shard_as_finished_as_the_stored_run_or_more_replaces_it(
    tmp_path: Path, stored: State, shard: State
) -> None:
    db = tmp_path / "g.duckdb"
    store_state(db, "aaaaaaaaaaaa", stored)
    path = shard_state(db, "aaaaaaaaaaaa", shard)
    report = merge_pending(Store(db), timeout_s=5.0)
    assert report.left == [] and report.merged == [(path, ["aaaaaaaaaaaa"])]
    assert state_of(db, "aaaaaaaaaaaa") == shard and not path.exists()
    assert check_integrity(db) == []


@pytest.mark.parametrize(
    ("stored", "shard", "less_finished", "lost"),
    [
        (("ok", 2), ("running", 0), True, "0, 1"),  # a leftover of a run collected elsewhere
        (("ok", 2), ("failed", 0), True, "0, 1"),
        (("ok", 2), ("interrupted", 0), True, "0, 1"),
        (("ok", 2), ("skipped", 0), True, "0, 1"),
        (("failed", 0), ("running", 0), True, None),
        (("interrupted", 0), ("running", 0), True, None),
        (("skipped", 0), ("running", 0), True, None),
        (("ok", 2), ("ok", 1), False, "1"),  # as finished, but with fewer results
        (("failed", 2), ("interrupted", 0), False, "0, 1"),
    ],
)
def test_a_stale_shard_is_a_conflict_reported_and_left(
    tmp_path: Path, stored: State, shard: State, less_finished: bool, lost: str | None
) -> None:
    db = tmp_path / "g.duckdb"
    store_state(db, "aaaaaaaaaaaa", stored)
    path = shard_state(db, "aaaaaaaaaaaa", shard)
    kept, untouched = snapshot(path), snapshot(db)
    report = merge_pending(Store(db), timeout_s=5.0)
    assert report.merged == [] and [s for s, _ in report.left] == [path]
    (why,) = [why for _, why in report.left]
    assert "aaaaaaaaaaaa" in why
    status_line = f"run aaaaaaaaaaaa is stored {stored[0]}, the shard has it {shard[0]}"
    assert (status_line in why) == less_finished
    if lost is None:
        assert "repeat" not in why
    else:
        assert f"repeat(s) {lost}" in why
    assert snapshot(db) == untouched and state_of(db, "aaaaaaaaaaaa") == stored
    assert pending_shards(db) == [path] and snapshot(path) == kept  # left in place, untouched
    assert check_integrity(db) == []


def test_merge_refuses_a_stale_shard_of_a_stored_run_and_says_what_conflicts(
    tmp_path: Path,
) -> None:
    db = tmp_path / "g.duckdb"
    store_state(db, "aaaaaaaaaaaa", ("ok", 2))
    before = counts(db)
    stale = shard_state(db, "aaaaaaaaaaaa", ("running", 0))
    good = shard_state(db, "bbbbbbbbbbbb", ("ok", 2))
    kept = snapshot(stale)
    for i in range(2):  # and again: the conflict stays until someone deals with the shard
        result = CliRunner().invoke(main, ["merge", "--db", str(db)])
        assert result.exit_code == 1
        assert ("merged shard bbbbbbbbbbbb.duckdb" in result.stdout) == (i == 0)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"left shard {stale} in place: ")
        assert "run aaaaaaaaaaaa is stored ok, the shard has it running" in line
        assert "repeat(s) 0, 1" in line
    assert state_of(db, "aaaaaaaaaaaa") == ("ok", 2)
    assert state_of(db, "bbbbbbbbbbbb") == ("ok", 2) and not good.exists()
    assert counts(db)["results"] == before["results"] + 2
    assert pending_shards(db) == [stale] and snapshot(stale) == kept


def test_a_run_collected_as_failed_takes_its_jobs_late_ok_shard(tmp_path: Path) -> None:
    """The submitter stores a run its job did not finish as failed; the job's shard with the
    run ok, arriving later (a requeued job, a slow file system), still replaces it."""
    from greenbench.store.shard_writer import ShardStore, store_unfinished

    db = tmp_path / "g.duckdb"
    store = Store(db)
    row = run_row("aaaaaaaaaaaa", host="node-17")
    store_unfinished(db, row, "failed", "job 7 FAILED without a result")
    assert [ids for _, ids in merge_pending(store, timeout_s=5.0).merged] == [["aaaaaaaaaaaa"]]
    assert state_of(db, "aaaaaaaaaaaa") == ("failed", 0)
    job = ShardStore(db)
    job.begin_run(row)
    job.finish_run("aaaaaaaaaaaa", make_outcome())
    report = merge_pending(store, timeout_s=5.0)
    assert report.left == [] and [ids for _, ids in report.merged] == [["aaaaaaaaaaaa"]]
    assert state_of(db, "aaaaaaaaaaaa") == ("ok", 2)
    assert get_run(db, "aaaaaaaaaaaa")["error"] is None


# --------------------------------------------------------------------------- foreign shards


@pytest.mark.parametrize(
    "content",
    [b"", b"id,energy_j\n1,2.5\n", bytes(range(256)) * 64],
    ids=["empty", "text", "binary"],
)
def test_a_file_that_is_no_duckdb_file_is_named_as_a_shard(tmp_path: Path, content: bytes) -> None:
    db = tmp_path / "g.duckdb"
    store_state(db, "aaaaaaaaaaaa", ("ok", 2))
    before = counts(db)
    shard_dir(db).mkdir()
    stray = shard_dir(db) / "X.duckdb"
    stray.write_bytes(content)
    kept = snapshot(stray)
    result = CliRunner().invoke(main, ["merge", "--db", str(db)])
    assert result.exit_code == 1 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"left shard {stray} in place: not a DuckDB file")
    assert "--db" not in line and "database" not in line.split(" in place: ")[1]
    assert snapshot(stray) == kept and counts(db) == before


def test_a_duckdb_file_of_another_kind_is_named_as_a_shard(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    Store(db)
    shard_dir(db).mkdir()
    foreign = shard_dir(db) / "X.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE invoices (id INTEGER)")
    con.close()
    damaged = write_shard(db, run_row("aaaaaaaaaaaa"), outcome=make_outcome())
    with damaged.open("r+b") as f:
        f.truncate(damaged.stat().st_size // 2)
    result = CliRunner().invoke(main, ["merge", "--db", str(db)])
    assert result.exit_code == 1
    lines = dict(line.split(" in place: ", 1) for line in result.stderr.strip().splitlines())
    assert set(lines) == {f"left shard {foreign}", f"left shard {damaged}"}
    assert "not a greenbench result shard" in lines[f"left shard {foreign}"]
    assert "invoices" in lines[f"left shard {foreign}"]
    assert lines[f"left shard {damaged}"].startswith("the shard is damaged")
    assert not any("--db" in why for why in lines.values())
