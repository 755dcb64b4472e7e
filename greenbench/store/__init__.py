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
"""

from greenbench.store.connection import read_frame
from greenbench.store.queries import (
    EXPORT_FORMATS,
    check_integrity,
    export,
    get_run,
    list_runs,
    power_samples,
    unfinished_runs,
)
from greenbench.store.writer import (
    FINAL_STATUSES,
    MIGRATIONS,
    RUN_STATUSES,
    SCHEMA_VERSION,
    Store,
    new_run_id,
)
from greenbench.vocabulary import config_key

__all__ = [
    "EXPORT_FORMATS",
    "FINAL_STATUSES",
    "MIGRATIONS",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "Store",
    "check_integrity",
    "config_key",
    "export",
    "get_run",
    "list_runs",
    "new_run_id",
    "power_samples",
    "read_frame",
    "unfinished_runs",
]
