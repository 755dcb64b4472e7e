"""The writer of a cluster job: every run to a result shard of its own, never the database.

A cluster job must not open the shared results database (one writer, and network file systems
lock badly): ``ShardStore`` takes the launcher's writes (``begin_run``, ``finish_run``,
``mark_run``) and puts each finished run in ``<db>.shards/<run_id>.duckdb`` through
``writer.write_shard`` (the store's own schema, written whole or not at all), which
`greenbench merge` folds in.

A job can die between the two (killed, out of memory, preempted): then no shard says what
became of the run it had begun. So ``begin_run`` also leaves a small hidden note,
``<db>.shards/.<run_id>.begun.json``, holding the run's row as the node filled it (host,
hardware, versions, start time); the final shard removes it. The submitter, told by the
scheduler that the job ended badly, stores the run from that note with the scheduler's reason
(``store_unfinished``), so a killed configuration is kept as failed or interrupted, with the
machine it died on, rather than lost.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from greenbench.errors import StoreError
from greenbench.results import RunOutcome
from greenbench.store.connection import ready_shard_dir, shard_dir
from greenbench.store.writer import FINAL_STATUSES, write_shard

_BEGUN = ".{run_id}.begun.json"


def begun_note(db_path: str | Path, run_id: str) -> Path:
    """Where a job notes the row of a run it has begun and not yet stored."""
    return shard_dir(db_path) / _BEGUN.format(run_id=run_id)


class ShardStore:
    """A job's store: the ``Store`` writes a launcher makes, each run to its own shard."""

    def __init__(self, db_path: str | Path) -> None:
        self.path = Path(db_path)
        self.lock_timeout_s = 0.0
        ready_shard_dir(self.path)  # a job never starts without a place for its results
        self._rows: dict[str, dict[str, Any]] = {}

    def begin_run(self, row: dict[str, Any]) -> bool:
        """Keep the run's row for its shard and note it on disk (see the module's text)."""
        run_id = row["run_id"]
        self._rows[run_id] = dict(row)
        note = begun_note(self.path, run_id)
        tmp = note.with_name(f"{note.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(row, default=_jsonable), encoding="utf-8")
            os.replace(tmp, note)
        except OSError as exc:
            raise StoreError(f"cannot note run {run_id} in {note.parent}: {exc}") from None
        return True

    def finish_run(self, run_id: str, outcome: RunOutcome) -> None:
        """Write the run's shard with its results; the note of its beginning goes."""
        self._write(run_id, outcome=outcome)

    def mark_run(self, run_id: str, status: str, error: str | None = None) -> None:
        """Write the run's shard with a final status and no results."""
        if status not in FINAL_STATUSES:
            raise StoreError(f"mark_run: status must be one of {FINAL_STATUSES}, got {status!r}")
        self._write(run_id, status=status, error=error)

    def _write(self, run_id: str, **final: Any) -> None:
        if run_id not in self._rows:
            raise StoreError(f"no run {run_id!r} begun in this job (begin_run it first)")
        write_shard(self.path, self._rows.pop(run_id), **final)
        begun_note(self.path, run_id).unlink(missing_ok=True)


def read_begun(db_path: str | Path, run_id: str) -> dict[str, Any] | None:
    """The row a job noted when it began ``run_id`` (None: it never began it, or stored it)."""
    note = begun_note(db_path, run_id)
    try:
        row = json.loads(note.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # a note cut short by the job's death: as if never begun
        return None
    if isinstance(row.get("started_at"), str):
        row["started_at"] = datetime.fromisoformat(row["started_at"])
    return row


def store_unfinished(db_path: str | Path, row: dict[str, Any], status: str, error: str) -> Path:
    """Store a run its job did not finish as ``status`` with ``error`` (the scheduler's reason),
    as a shard the next merge folds in; the job's note of it goes."""
    path = write_shard(db_path, row, status=status, error=error)
    begun_note(db_path, row["run_id"]).unlink(missing_ok=True)
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
