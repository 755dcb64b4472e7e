"""The launcher never loses a trained result to the database, and never trains for a database
that cannot take it: a reader holding the file while a run finishes sends the run to a result
shard (merged afterwards), and a truncated or corrupt file is refused, untouched, before the
first configuration trains.

The reader is a real second process with a real DuckDB connection; the runs are real workers.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner
from helpers import QUICK

from greenbench.cli import main
from greenbench.launcher import launch
from greenbench.launcher.runners import Peak, RunContext, torchrun
from greenbench.spec import expand
from greenbench.store import (
    check_integrity,
    get_run,
    pending_shards,
    read_frame,
    shard_dir,
    write_shard,
)

QUICK_ARGS = [
    "run", "--workload", "transformer-vs-mamba", "--repeats", "1",
    *(a for k, v in QUICK.items() if k != "repeats" for a in ("--set", f"{k}={v}")),
]  # fmt: skip

READER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
con.execute("SELECT count(*) FROM runs").fetchall()
print("held", flush=True)
sys.stdin.readline()
con.close()
"""


@contextmanager
def reader_holding(db: Path) -> Iterator[subprocess.Popen]:
    """Another process (a dashboard, an export, a notebook) holding a read-only connection."""
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


def snapshot(db: Path) -> tuple[bytes, int, list[str]]:
    """The file's bytes and mtime, and what lies beside it (no journal, shard or log folder)."""
    return db.read_bytes(), db.stat().st_mtime_ns, sorted(p.name for p in db.parent.iterdir())


def results_data_offset(db: Path) -> int:
    """Where in the file the ``results`` table's data starts, in the block nearest the middle of
    the file. A DuckDB file is 3 × 4 KiB of headers, then fixed-size blocks, each an 8-byte
    checksum and then data; the checksum covers the part of the block in use."""
    con = duckdb.connect(str(db), read_only=True)
    block_size = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()[0]
    segments = con.execute(
        "SELECT block_id, block_offset FROM pragma_storage_info('results') WHERE block_id >= 0"
    ).fetchall()
    con.close()
    middle = (db.stat().st_size - 3 * 4096) / block_size / 2
    block, offset = min(segments, key=lambda seg: (abs(seg[0] - middle), seg[1]))
    return 3 * 4096 + block * block_size + 8 + offset


def no_training(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a configuration trained")


@pytest.mark.slow
def test_a_reader_holding_the_database_does_not_lose_a_trained_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "r.duckdb"
    real_execute = torchrun.execute
    readers = ExitStack()

    def train_then_a_reader_opens_the_database(*args: Any, **kwargs: Any) -> Any:
        execution = real_execute(*args, **kwargs)  # real workers, a real result
        readers.enter_context(reader_holding(db))  # held until after the final write
        return execution

    monkeypatch.setattr(torchrun, "execute", train_then_a_reader_opens_the_database)
    monkeypatch.setenv("GREENBENCH_LOCK_WAIT_S", "1")
    events: list[tuple[str, dict[str, Any]]] = []
    with readers:
        summary = launch.run_specs(
            expand("transformer-vs-mamba", [QUICK]), db,
            on_event=lambda kind, spec, info: events.append((kind, info)),
        )  # fmt: skip
        (run_id,) = summary.run_ids
        assert summary.statuses == ["ok"]  # the suite goes on: the run counts as stored
        assert pending_shards(db) == [shard_dir(db) / f"{run_id}.duckdb"]
        assert [info["waited_s"] for kind, info in events if kind == "wait"]  # shown waiting
        notes = [info["message"] for kind, info in events if kind == "note"]
        assert any(f"{run_id} was stored in {shard_dir(db)}" in note for note in notes)
    assert list(read_frame(db, "SELECT status FROM runs").status) == ["running"]

    result = CliRunner().invoke(main, ["merge", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert f"run(s) {run_id}" in result.stdout
    run = get_run(db, run_id)
    assert run["status"] == "ok" and len(run["results"]) == 1
    assert run["results"][0]["tokens_per_s"] > 0 and run["rank_results"]
    assert pending_shards(db) == [] and check_integrity(db) == []


def test_the_next_run_merges_pending_shards(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    spec = launch.resolve_spec(expand("transformer-vs-mamba", [QUICK])[0])
    ctx = RunContext("aaaaaaaaaaaa", {}, (475.0, "world"), Peak(None, None, "cpu:Test CPU"))
    row = torchrun.TorchrunRunner().record(spec, ctx).row()
    shard = write_shard(db, row, status="failed", error="rank 0: boom")  # as a job leaves one
    events: list[tuple[str, dict[str, Any]]] = []
    launch.run_specs([], db, on_event=lambda kind, _, info: events.append((kind, info)))
    assert events == [
        ("note", {"message": f"merged shard {shard.name} into {db}: run(s) aaaaaaaaaaaa"})
    ]
    run = get_run(db, "aaaaaaaaaaaa")
    assert (run["status"], run["error"]) == ("failed", "rank 0: boom")
    assert pending_shards(db) == []


@pytest.mark.parametrize("damage", ["truncated", "corrupt block"])
def test_run_refuses_a_damaged_database_before_training(
    seeded_db: Path, damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = results_data_offset(seeded_db)
    with seeded_db.open("r+b") as f:
        if damage == "truncated":  # the file ends inside the results' data (a copy cut short)
            f.truncate(at + 16)
        else:  # a few bytes of the results' data overwritten
            f.seek(at)
            f.write(b"\xde\xad\xbe\xef" * 4)
    with pytest.raises(duckdb.Error, match=r"(?i)could not read|checksum"):  # the damage is real
        con = duckdb.connect(str(seeded_db), read_only=True)
        try:
            con.execute("SELECT * FROM results").fetchall()
        finally:
            con.close()
    before = snapshot(seeded_db)
    monkeypatch.setattr(torchrun, "execute", no_training)
    result = CliRunner().invoke(main, [*QUICK_ARGS, "--db", str(seeded_db)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {seeded_db} is damaged")
    assert snapshot(seeded_db) == before


def test_an_unusable_lock_wait_is_refused_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torchrun, "execute", no_training)
    monkeypatch.setenv("GREENBENCH_LOCK_WAIT_S", "soon")
    result = CliRunner().invoke(main, [*QUICK_ARGS, "--db", str(tmp_path / "r.duckdb")])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "GREENBENCH_LOCK_WAIT_S must be a number of seconds" in line
    assert list(tmp_path.iterdir()) == []
