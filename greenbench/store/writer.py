"""The one writer of the results database (the launcher): schema creation, migrations, runs and
their results written in short transactions; plus the identity of a configuration."""

from __future__ import annotations

import importlib
import json
import os
import secrets
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from greenbench.errors import StoreError
from greenbench.results import RepeatResult, RunOutcome
from greenbench.store.connection import (
    _JSON_COLUMNS,
    DatabaseLocked,
    FileRefused,
    _check_duckdb_file,
    _connect,
    _read,
    ready_shard_dir,
    verify_file,
)
from greenbench.vocabulary import config_key

Migration = str | Callable[[duckdb.DuckDBPyConnection], None]


def _load_migrations() -> dict[int, Migration]:
    """``migrations/NNNN_name.sql`` (SQL) or ``NNNN_name.py`` (its ``apply(con)``, for what SQL
    alone cannot do) takes a database from version NNNN − 1 to NNNN. Two files of one number
    are refused: one of them would silently never apply."""
    found: dict[int, Migration] = {}
    names: dict[int, str] = {}
    for entry in resources.files("greenbench.store").joinpath("migrations").iterdir():
        name = entry.name
        if not name[:4].isdigit() or not name.endswith((".sql", ".py")):
            continue
        number = int(name[:4])
        if number in names:
            raise StoreError(
                f"two schema migrations numbered {number:04d}: {names[number]}, {name}"
            )
        names[number] = name
        if name.endswith(".sql"):
            found[number - 1] = entry.read_text()
        else:
            module = importlib.import_module(f"greenbench.store.migrations.{name[:-3]}")
            found[number - 1] = module.apply
    return dict(sorted(found.items()))


#: what takes a database from version N (the key) to N + 1, applied in one transaction
MIGRATIONS: dict[int, Migration] = _load_migrations()
SCHEMA_VERSION = 1 + len(MIGRATIONS)

RUN_STATUSES = ("running", "ok", "failed", "interrupted", "skipped")
#: skipped: refused before it ran (it cannot fit this machine), with the reason as its error
FINAL_STATUSES = ("ok", "failed", "interrupted", "skipped")
SHARD_SUFFIX = ".duckdb"
#: the tables a run's results fill, replaced whole when its results are written again
RESULT_TABLES = (
    "results", "rank_results", "power_samples", "comm_records", "val_curve", "run_events"
)  # fmt: skip


def new_run_id() -> str:
    """A fresh run id: 12 random hex characters."""
    return secrets.token_hex(6)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Store:
    """The results database, opened by its only writer (the launcher).

    Opening validates (or creates, or migrates) the file; with ``verify`` it also reads every
    block of it first (``connection.verify_file``). Each write opens the file, runs one
    transaction and closes it. Used as a context manager, runs begun here and not finished when
    the block exits are marked ``interrupted`` (``failed`` if an exception other than
    KeyboardInterrupt escaped), so a killed suite never leaves rows that claim to be running.

    Another process holding the file (a dashboard, an export, a notebook) blocks every write.
    Writes wait ``lock_timeout_s`` for it (a finished run's results ``write_wait_s``), calling
    ``on_wait(seconds waited)`` meanwhile; then a run begun here goes to a result shard of its
    own (``write_shard``) that `shards.merge_pending` folds in later (the launcher's next open,
    `greenbench merge`), so a measurement is never lost to a lock. ``begin_run`` on a locked
    file defers the row to the run's final write.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        lock_timeout_s: float = 5.0,
        write_wait_s: float | None = None,
        verify: bool = False,
        shard_fallback: bool = True,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self.write_wait_s = lock_timeout_s if write_wait_s is None else write_wait_s
        self.shard_fallback = shard_fallback
        self.on_wait = on_wait
        self._unfinished: set[str] = set()
        self._rows: dict[str, dict[str, Any]] = {}  # runs rows begun here, for a shard
        self._deferred: set[str] = set()  # begun while the file was locked: row not stored yet
        self._check_location()
        if not self.path.exists():
            self._create()
        version = self._inspect()
        if verify:
            verify_file(
                self.path,
                read_timeout_s=lock_timeout_s,
                write_timeout_s=self.write_wait_s,
                on_wait=on_wait,
            )
        if version < SCHEMA_VERSION:
            self._migrate(version)
            self._inspect()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any):
        if exc_type is None:
            status, error = "interrupted", "the launcher closed the store before the run finished"
        elif issubclass(exc_type, KeyboardInterrupt):
            status, error = "interrupted", "interrupted by the user"
        else:
            status, error = "failed", f"{exc_type.__name__}: {exc}"
        for run_id in sorted(self._unfinished):
            try:
                self.mark_run(run_id, status, error)
            except StoreError as err:  # never mask the exception that got us here
                warnings.warn(f"could not mark run {run_id} {status}: {err}", stacklevel=2)
        return False

    # ----------------------------------------------------------------------- opening

    def _check_location(self) -> None:
        parent = self.path.absolute().parent
        if not parent.is_dir():
            raise StoreError(
                f"cannot create results database {self.path}: directory {parent} does not exist "
                "(create it, or pass another --db)"
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise StoreError(
                f"cannot write results database {self.path}: directory {parent} is not "
                "writable (DuckDB writes a journal next to the file); pass another --db"
            )
        if self.path.exists() and (self.path.is_dir() or not os.access(self.path, os.W_OK)):
            raise FileRefused(
                f"{self.path} is not a writable file; pass another --db",
                kind="unwritable",
                reason="not a writable file",
            )

    def _create(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            con = duckdb.connect(str(tmp))
            try:
                con.begin()
                con.execute(resources.files("greenbench").joinpath("store_schema.sql").read_text())
                con.execute("INSERT INTO schema_version VALUES (1, ?)", [_utcnow()])
                _apply_migrations(con, 1)
                con.commit()
            finally:
                con.close()
            try:
                os.link(tmp, self.path)  # atomic, and never replaces a file created meanwhile
            except FileExistsError:
                pass
            except OSError:  # filesystems without hard links
                if not self.path.exists():
                    os.replace(tmp, self.path)
        except (OSError, duckdb.Error) as exc:
            raise StoreError(f"cannot create results database {self.path}: {exc}") from None
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                leftover.unlink(missing_ok=True)

    def _inspect(self) -> int:
        """Check the file is a greenbench database we understand; return its schema version."""
        _check_duckdb_file(self.path)

        def look(con: duckdb.DuckDBPyConnection) -> tuple[set[str], int | None, list[tuple]]:
            tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
            if not {"runs", "results", "schema_version"} <= tables:
                return tables, None, []
            version = con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
            return tables, version, con.execute("DESCRIBE runs").fetchall()

        tables, version, runs_desc = _read(self.path, look, self.lock_timeout_s)
        if version is None:
            found = f"tables: {', '.join(sorted(tables)) or 'none'}"
            raise FileRefused(
                f"{self.path} is a DuckDB database but not a greenbench results database "
                f"({found}); pass another --db path",
                kind="foreign",
                reason=found,
            )
        if version > SCHEMA_VERSION:
            newer = (
                f"schema version {version}, newer than this greenbench understands "
                f"({SCHEMA_VERSION})"
            )
            raise FileRefused(
                f"{self.path} has {newer}: upgrade greenbench to write to it",
                kind="newer",
                reason=newer,
            )
        self._columns = {r[0] for r in runs_desc}
        self._required = {r[0] for r in runs_desc if r[2] == "NO" and r[4] is None}
        return version

    def _migrate(self, from_version: int) -> None:
        with self._transaction() as con:
            # re-read under the write lock: another writer may have migrated meanwhile
            current = con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
            try:
                _apply_migrations(con, current)
            except duckdb.Error as exc:
                raise StoreError(
                    f"migrating {self.path} from schema version {from_version} failed ({exc}); "
                    "the file was left unchanged"
                ) from None

    @contextmanager
    def _transaction(self, wait_s: float | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        con = _connect(
            self.path,
            read_only=False,
            timeout_s=self.lock_timeout_s if wait_s is None else wait_s,
            on_wait=self.on_wait,
        )
        try:
            con.begin()
            try:
                yield con
                con.commit()
            except BaseException:
                con.rollback()
                raise
        except duckdb.Error as exc:
            raise StoreError(f"write to {self.path} failed: {exc}") from None
        finally:
            con.close()

    # ----------------------------------------------------------------------- writes

    def begin_run(self, row: dict[str, Any]) -> bool:
        """Insert one ``runs`` row with status 'running' (``started_at`` defaults to now, UTC;
        ``config_key`` defaults to the key of the row's ``config`` as given: the launcher and
        ``greenbench.measure`` give the key of the run's identity, `greenbench.settings`).

        Returns False when another process held the file past ``lock_timeout_s``: the row is
        then kept here and written with the run's final write (to the file, or to a shard), and
        the shard folder is checked now, so that a run never starts without a place to go."""
        row = dict(row)
        unknown = set(row) - self._columns
        if unknown:
            raise StoreError(f"begin_run: unknown runs column(s): {', '.join(sorted(unknown))}")
        if row.get("status", "running") != "running":
            raise StoreError(f"begin_run: a new run has status 'running', got {row['status']!r}")
        row["status"] = "running"
        row.setdefault("started_at", _utcnow())
        if row.get("config_key") is None and isinstance(row.get("config"), dict):
            row["config_key"] = config_key(row["config"])
        missing = sorted(c for c in self._required if row.get(c) is None)
        if missing:
            raise StoreError(f"begin_run: missing required runs column(s): {', '.join(missing)}")
        for col in _JSON_COLUMNS:
            if col in row and row[col] is not None and not isinstance(row[col], str):
                row[col] = json.dumps(row[col], sort_keys=True, default=str)
        for col, value in row.items():
            if isinstance(value, datetime) and value.tzinfo is not None:
                row[col] = value.astimezone(timezone.utc).replace(tzinfo=None)
        try:
            with self._transaction() as con:
                _insert_run(con, row)
        except DatabaseLocked:
            if not self.shard_fallback:
                raise
            ready_shard_dir(self.path)
            self._deferred.add(row["run_id"])
        except StoreError as exc:
            if "constraint" in str(exc).lower():
                raise StoreError(
                    f"run id {row['run_id']!r} already exists in {self.path}"
                ) from None
            raise
        self._rows[row["run_id"]] = row
        self._unfinished.add(row["run_id"])
        return row["run_id"] not in self._deferred

    def finish_run(self, run_id: str, outcome: RunOutcome) -> Path | None:
        """Store a run's repeats (their validation curves in ``val_curve``), rank results and
        power samples and close its ``runs`` row (with its repeats' target loss, where it
        trained to one), in one transaction. Calling it again for the same run replaces what
        was stored.

        Waits up to ``write_wait_s`` for a file another process holds; if it cannot be written
        then (or the write fails), a run begun here goes to a shard, whose path is returned
        (None: stored in the file)."""
        if outcome.status not in FINAL_STATUSES:
            raise StoreError(f"finish_run: status must be one of {FINAL_STATUSES}")
        results = [_result_row(run_id, r) for r in outcome.repeats]
        curve = [
            (run_id, r.repeat, p.step, p.tokens, p.seconds, p.joules, p.val_loss)
            for r in outcome.repeats
            for p in r.val_curve
        ]
        events = [
            (run_id, e.repeat, seq, e.kind, e.step, e.rank, e.t_s, e.seconds, e.joules,
             e.tokens, e.bytes, e.note)
            for seq, e in enumerate(outcome.events)
        ]  # fmt: skip
        targets = [r.target_loss for r in outcome.repeats if r.target_loss is not None]
        ranks = [_rank_row(run_id, r) for r in outcome.ranks]
        comm = [
            (run_id, r.repeat, r.rank, c.dim, c.op, c.calls, c.bytes, c.seconds, c.wait_s)
            for r in outcome.ranks
            for c in r.comm
        ]
        samples = _samples_frame(
            [
                (run_id, r.repeat, r.rank, s.t_s, s.power_w, s.component)
                for r in outcome.ranks
                for w in (r.energy, *r.extra_energy)
                if w is not None
                for s in w.samples
            ]
        )
        parts = sorted({p for r in outcome.repeats for p in r.energy_source.split("+")})
        source = "+".join(parts) if parts else None
        measured = all(r.energy_measured for r in outcome.repeats) if outcome.repeats else None
        hardware = json.dumps(outcome.hardware, sort_keys=True) if outcome.hardware else None
        # what greenbench cost the run (schema version 16 on: every database the store opens
        # is migrated to it; a file held at an older version in a test simply lacks them)
        harness = {c: v for c, v in outcome.harness.row().items() if c in self._columns}
        try:
            with self._transaction(self.write_wait_s) as con:
                self._own_row(con, run_id)
                for table in RESULT_TABLES:
                    con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
                for table, rows in (("results", results), ("rank_results", ranks)):
                    if rows:
                        cols = list(rows[0])
                        con.executemany(
                            f"INSERT INTO {table} ({', '.join(cols)}) "
                            f"VALUES ({', '.join('?' * len(cols))})",
                            [[row[c] for c in cols] for row in rows],
                        )
                if comm:
                    con.executemany(
                        "INSERT INTO comm_records (run_id, repeat, rank, dim, op, calls, bytes, "
                        "seconds, wait_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        comm,
                    )
                if curve:
                    con.executemany(
                        "INSERT INTO val_curve (run_id, repeat, step, tokens, seconds, joules, "
                        "val_loss) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        curve,
                    )
                if events:
                    con.executemany(
                        "INSERT INTO run_events (run_id, repeat, seq, kind, step, rank, t_s, "
                        "seconds, joules, tokens, bytes, note) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        events,
                    )
                if samples is not None:
                    con.register("_greenbench_samples", samples)
                    cols = ", ".join(samples.columns)
                    con.execute(
                        f"INSERT INTO power_samples ({cols}) SELECT {cols} FROM _greenbench_samples"
                    )
                    con.unregister("_greenbench_samples")
                con.execute(
                    "UPDATE runs SET status = ?, error = ?, failed_rank = ?, finished_at = ?, "
                    "energy_source = COALESCE(?, energy_source), "
                    "energy_measured = COALESCE(?::BOOLEAN, energy_measured), "
                    "peak_flops = COALESCE(?::DOUBLE, peak_flops), "
                    "peak_flops_source = COALESCE(?, peak_flops_source), "
                    "hardware = COALESCE(?::JSON, hardware), warnings = ?::JSON, error_tail = ?, "
                    "log_path = ?, contended = ?, others_busy_cores = ?, other_greenbench = ?, "
                    + "".join(f"{column} = ?, " for column in harness)
                    + "target_loss = COALESCE(?::DOUBLE, target_loss) WHERE run_id = ?",
                    [outcome.status, outcome.error, outcome.failed_rank, _utcnow(), source,
                     measured, outcome.peak_flops, outcome.peak_flops_source, hardware,
                     json.dumps(outcome.warnings) if outcome.warnings else None,
                     outcome.error_tail, outcome.log_path, outcome.contended,
                     outcome.others_busy_cores, outcome.other_greenbench, *harness.values(),
                     targets[0] if targets else None, run_id],
                )  # fmt: skip
        except StoreError as exc:
            return self._to_shard(run_id, exc, outcome=outcome)
        self._done(run_id)
        return None

    def mark_run(self, run_id: str, status: str, error: str | None = None) -> Path | None:
        """Set a run's final status (and error text) without results, e.g. 'interrupted'.
        Like ``finish_run``, a run begun here goes to a shard (returned) if the file cannot be
        written within ``lock_timeout_s``."""
        if status not in FINAL_STATUSES:
            raise StoreError(f"mark_run: status must be one of {FINAL_STATUSES}, got {status!r}")
        try:
            with self._transaction() as con:
                self._own_row(con, run_id)
                con.execute(
                    "UPDATE runs SET status = ?, error = ?, finished_at = ? WHERE run_id = ?",
                    [status, error, _utcnow(), run_id],
                )
        except StoreError as exc:
            return self._to_shard(run_id, exc, status=status, error=error)
        self._done(run_id)
        return None

    def _own_row(self, con: duckdb.DuckDBPyConnection, run_id: str) -> None:
        """The run's ``runs`` row exists in this transaction: written now if it was deferred."""
        if run_id in self._deferred:
            _insert_run(con, self._rows[run_id])
        else:
            self._require_run(con, run_id)

    def _to_shard(self, run_id: str, exc: StoreError, **final: Any) -> Path:
        """Write a run begun here that the file would not take to its own shard; re-raise
        ``exc`` for any other run (nothing to write a shard from)."""
        if not self.shard_fallback or run_id not in self._rows:
            raise exc
        try:
            path = write_shard(self.path, self._rows[run_id], **final)
        except StoreError as err:
            raise StoreError(
                f"run {run_id} could not be stored: {exc}; nor in a shard: {err}"
            ) from None
        self._done(run_id)
        return path

    def _done(self, run_id: str) -> None:
        self._unfinished.discard(run_id)
        self._deferred.discard(run_id)

    def _require_run(self, con: duckdb.DuckDBPyConnection, run_id: str) -> None:
        if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is None:
            raise StoreError(f"no run {run_id!r} in {self.path} (begin_run it first)")


def write_shard(
    db_path: str | Path,
    row: dict[str, Any],
    *,
    outcome: RunOutcome | None = None,
    status: str | None = None,
    error: str | None = None,
) -> Path:
    """Write one run to its result shard ``<db>.shards/<run_id>.duckdb`` (a small results
    database of its own, the same schema) and return its path: its ``runs`` row, as
    ``begin_run`` takes it, closed by ``outcome`` (results, ranks, power samples, communication
    records) or by a final ``status`` without results. The shard is written under a hidden name
    and renamed when complete, so no shard is ever half written; one already there for the run
    is replaced, as a second ``finish_run`` replaces what was stored."""
    folder = ready_shard_dir(db_path)
    run_id = row["run_id"]
    target = folder / f"{run_id}{SHARD_SUFFIX}"
    tmp = folder / f".{run_id}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        shard = Store(tmp, shard_fallback=False)
        shard.begin_run({**row, "status": "running"})
        if outcome is not None:
            shard.finish_run(run_id, outcome)
        elif status is not None:
            shard.mark_run(run_id, status, error)
        os.replace(tmp, target)
    except OSError as exc:
        raise StoreError(f"cannot write shard {target}: {exc}") from None
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)
    return target


def _insert_run(con: duckdb.DuckDBPyConnection, row: dict[str, Any]) -> None:
    cols = sorted(row)
    sql = f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    con.execute(sql, [row[c] for c in cols])


def _apply_migrations(con: duckdb.DuckDBPyConnection, from_version: int) -> None:
    for version in range(from_version, SCHEMA_VERSION):
        if version not in MIGRATIONS:
            raise StoreError(f"no migration from schema version {version} to {version + 1}")
        step = MIGRATIONS[version]
        if isinstance(step, str):
            con.execute(step)
        else:
            step(con)
        con.execute("INSERT INTO schema_version VALUES (?, ?)", [version + 1, _utcnow()])


def _samples_frame(rows: list[tuple[Any, ...]]) -> Any:
    """Power samples as a pandas frame DuckDB inserts in one statement (thousands of rows:
    ``executemany`` is slow for them), or None without any; pandas is imported only then, so
    a run without samples (a whole process's estimate) is stored without paying for it."""
    if not rows:
        return None
    import pandas as pd

    return pd.DataFrame(rows, columns=["run_id", "repeat", "rank", "t_s", "power_w", "component"])


def _result_row(run_id: str, r: RepeatResult) -> dict[str, Any]:
    """A repeat's ``results`` row: its fields but the validation curve (``val_curve`` rows)."""
    row = {"run_id": run_id, **r.to_dict(), "step_times_s": json.dumps(list(r.step_times_s))}
    del row["val_curve"]
    return row


def _rank_row(run_id: str, r: Any) -> dict[str, Any]:
    w = r.energy
    return {
        "run_id": run_id, "repeat": r.repeat, "rank": r.rank, "local_rank": r.local_rank,
        "host": r.host, "tokens": r.tokens, "seconds": r.seconds, "compute_s": r.compute_s,
        "comm_s": r.comm_s, "wait_s": r.wait_s, "peak_mem_bytes": r.peak_mem_bytes,
        "flops": r.flops, "flops_causal": r.flops_causal, "loss": r.loss,
        "n_microbatches": r.n_microbatches,
        "step_times_s": json.dumps(list(r.step_times_s)),
        "energy_source": w.source if w else None,
        "energy_measured": w.measured if w else None,
        "energy_seconds": w.seconds if w else None,
        "energy_j": w.energy_j if w else None,
        "energy_gpu_j": w.energy_gpu_j if w else None,
        "energy_cpu_j": w.energy_cpu_j if w else None,
        "energy_dram_j": w.energy_dram_j if w else None,
        "energy_note": w.note if w else None,
        "param_bytes": r.param_bytes, "grad_bytes": r.grad_bytes, "optim_bytes": r.optim_bytes,
        "activation_bytes": r.activation_bytes, "state_bytes": r.state_bytes,
    }  # fmt: skip
