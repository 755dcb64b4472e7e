"""DuckDB storage of runs and results: schema, migrations, writes, queries.

One file, one writer (the launcher), short transactions; readers (dashboard, compare, report)
open read-only per query and close, so that a run can write while they are open. DuckDB lets
one process write and, while it does, nobody else open the file (not even read-only), so the
writer never holds its connection between writes and both sides retry with backoff.

Schema: ``store_schema.sql`` is version 1 and never changes once released; a later version is
an entry of ``MIGRATIONS`` (SQL taking version N to N+1). A new file gets the v1 schema plus
every migration, in one transaction, built in a temporary file and linked into place, so a
crash never leaves a half-made database behind. A file that is not ours, or is newer than this
code, is refused without being touched.

A run the file will not take in time (another process holds it) goes to a result shard beside
it, ``<db>.shards/<run_id>.duckdb`` (``write_shard``), which `greenbench merge` or the launcher's
next open folds in (``shards``); `greenbench import` brings another machine's database in the
same way, run by run (``imports``). `greenbench run` reads every block of the file before anything
trains, so a damaged file is refused, untouched, before minutes of training are spent on it.
"""

from greenbench.store.connection import DatabaseLocked, read_frame, shard_dir
from greenbench.store.imports import ImportReport, import_database
from greenbench.store.queries import (
    EXPORT_FORMATS,
    check_integrity,
    export,
    get_run,
    list_runs,
    machine_run_times,
    power_samples,
    run_totals,
    unfinished_runs,
)
from greenbench.store.shards import MergeReport, merge_pending, merge_shards, pending_shards
from greenbench.store.writer import (
    FINAL_STATUSES,
    MIGRATIONS,
    RUN_STATUSES,
    SCHEMA_VERSION,
    Store,
    new_run_id,
    write_shard,
)
from greenbench.vocabulary import config_key

__all__ = [
    "EXPORT_FORMATS",
    "FINAL_STATUSES",
    "MIGRATIONS",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "DatabaseLocked",
    "ImportReport",
    "MergeReport",
    "Store",
    "check_integrity",
    "config_key",
    "export",
    "get_run",
    "import_database",
    "list_runs",
    "machine_run_times",
    "merge_pending",
    "merge_shards",
    "new_run_id",
    "pending_shards",
    "power_samples",
    "read_frame",
    "run_totals",
    "shard_dir",
    "unfinished_runs",
    "write_shard",
]
