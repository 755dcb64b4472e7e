"""Read-only queries over the results database: listings, one run in full, power samples,
unfinished runs, each run's totals over its repeats, export and an integrity check. One run's
results and the export read MFU against the machine's peak, the run's own beside it
(`greenbench.store.views`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from greenbench.errors import OutputError, StoreError
from greenbench.outputs import atomic_file, resolve_target
from greenbench.store import views, writer
from greenbench.store.connection import _fetch_dicts, _read, read_every_table, read_frame
from greenbench.vocabulary import TARGET_FIGURES
from greenbench.vocabulary.trust import Trust, interval_for

if TYPE_CHECKING:
    import pandas as pd  # DuckDB imports it where a frame is read (.df())


def list_runs(db_path: str | Path, limit: int | None = 50, **filters: Any) -> pd.DataFrame:
    """Runs, newest first, with ``n_repeats``, the medians of tokens/s and J/token, and
    ``n_idle_unreliable``: the repeats whose idle baseline was unreliable (net energy unknown;
    0 in a database older than the check). From schema version 13 on, also a run to a target's
    ``n_reached`` (repeats that reached it; NULL for a window run), the median of each figure
    to target (``energy_to_target_j_median`` …, `TARGET_FIGURES`: a repeat that did not reach
    counts as above every one that did, so the median is NULL where that leaves it unknown, as
    `greenbench.aggregate.target.target_medians` gives it) and ``best_val_loss_median``.

    ``filters`` are ``column=value`` on ``runs`` columns (a list or tuple means IN, None means
    IS NULL), e.g. ``list_runs(db, workload="fsdp-vs-odc", label=["main", "feature"])``.
    """

    def query(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
        columns = {r[0] for r in con.execute("DESCRIBE runs").fetchall()}
        where, params = [], []
        for col, value in filters.items():
            if col not in columns:
                raise StoreError(f"unknown runs column {col!r} to filter on")
            if value is None:
                where.append(f"ru.{col} IS NULL")
            elif isinstance(value, (list, tuple, set)):
                where.append(f"ru.{col} IN ({', '.join('?' * len(value))})")
                params += list(value)
            else:
                where.append(f"ru.{col} = ?")
                params.append(value)
        idle = (
            "count(*) FILTER (WHERE idle_note <> '')"
            if "idle_note" in _columns(con, "results")
            else "0"
        )
        targets, target_medians = "", ""
        if "target_reached" in _columns(con, "results"):
            targets, target_medians = _target_medians_sql()
        sql = (
            "SELECT ru.*, COALESCE(s.n_repeats, 0) AS n_repeats, s.tokens_per_s_median, "
            "s.joules_per_token_median, COALESCE(s.n_idle_unreliable, 0) AS n_idle_unreliable"
            f"{target_medians} FROM runs ru LEFT JOIN (SELECT run_id, count(*) AS n_repeats, "
            "median(tokens_per_s) AS tokens_per_s_median, median(joules_per_token) AS "
            f"joules_per_token_median, {idle} AS n_idle_unreliable{targets} FROM results "
            "GROUP BY run_id) s USING (run_id)"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY ru.started_at DESC, ru.run_id"
            + (f" LIMIT {int(limit)}" if limit is not None else "")
        )
        return con.execute(sql, params).df()

    return _read(Path(db_path), query, timeout_s=8.0)


def _target_medians_sql() -> tuple[str, str]:
    """`list_runs`' aggregates of a run's repeats to a target (over results) and the columns
    they give (over those): a repeat that did not reach the target is +inf in each median,
    and a median that is not finite is unknown (NULL)."""
    inner = ", count(target_reached) AS n_to_target"
    inner += ", count(*) FILTER (WHERE target_reached) AS n_reached" + "".join(
        f", median(CASE WHEN target_reached THEN {f}::DOUBLE WHEN NOT target_reached THEN "
        f"'inf'::DOUBLE END) AS {f}_median"
        for f in TARGET_FIGURES
    )
    inner += ", median(best_val_loss) AS best_val_loss_median"
    outer = (
        ", CASE WHEN s.n_to_target > 0 THEN s.n_reached END AS n_reached"
        + "".join(
            f", CASE WHEN isfinite(s.{f}_median) THEN s.{f}_median END AS {f}_median"
            for f in TARGET_FIGURES
        )
        + ", s.best_val_loss_median"
    )
    return inner, outer


def get_run(db_path: str | Path, run_id: str) -> dict[str, Any]:
    """One run row (JSON columns parsed) with ``results``, ``rank_results``, ``comm_records``,
    ``val_curve`` (a run to a target's evaluations) and ``events`` (checkpoints, failures,
    restarts) as lists of dicts; ``run_id`` may be a
    unique prefix. Unknown or ambiguous → StoreError. MFU is read
    against the run's machine's peak, which the row carries with whether its own agrees
    (``peak_flops_machine``, ``peak_consistent``, ``peak_note``: `greenbench.store.views`)."""
    if not run_id:
        raise StoreError("get_run needs a run id (or a unique prefix of one)")

    def query(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
        runs = _fetch_dicts(
            con, "SELECT * FROM runs WHERE starts_with(run_id, ?) ORDER BY run_id", [run_id]
        )
        exact = [r for r in runs if r["run_id"] == run_id]
        if exact:
            runs = exact
        if not runs:
            raise StoreError(f"no run {run_id!r} in {db_path}: `greenbench list runs` shows them")
        if len(runs) > 1:
            ids = ", ".join(r["run_id"] for r in runs[:5])
            raise StoreError(f"run id prefix {run_id!r} is ambiguous: matches {ids}")
        run, rid = runs[0], runs[0]["run_id"]
        run["results"] = _fetch_dicts(con, _results_sql(con), [rid])
        run |= _fetch_dicts(con, views.RUN_PEAK, [rid])[0]
        run["rank_results"] = _fetch_dicts(
            con, "SELECT * FROM rank_results WHERE run_id = ? ORDER BY repeat, rank", [rid]
        )
        run["comm_records"] = _fetch_dicts(
            con,
            "SELECT * EXCLUDE (run_id) FROM comm_records WHERE run_id = ?"
            " ORDER BY repeat, rank, dim, op",
            [rid],
        )
        tables = {t for (t,) in con.execute(views.TABLE_NAMES).fetchall()}
        run["val_curve"] = (
            _fetch_dicts(con, views.VAL_CURVE, [rid]) if "val_curve" in tables else []
        )
        run["events"] = _fetch_dicts(con, views.RUN_EVENTS, [rid]) if "run_events" in tables else []
        return run

    return _read(Path(db_path), query, timeout_s=8.0)


def _results_sql(con: duckdb.DuckDBPyConnection) -> str:
    """A run's results, their columns as stored but MFU read against its machine's peak
    (`views.results_of_run_sql`; the run's `views.PEAK_COLUMNS` go on the run); as stored in
    a database older than the MFU notes (read-only readers do not migrate)."""
    stored = _columns(con, "results")
    if "mfu_note" not in stored:
        return "SELECT * FROM results WHERE run_id = ? ORDER BY repeat"
    return views.results_of_run_sql(exclude=(), extra=False, causal=views.CAUSAL_MFU in stored)


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}


def machine_run_times(
    db_path: str | Path,
    host: str,
    cpu_model: str,
    cores: int,
    limit: int = 500,
    *,
    timeout_s: float = 8.0,
) -> list[dict[str, Any]]:
    """The ok runs of one machine (its host, CPU model and logical cores, as its fingerprint
    stored them), newest first, at most ``limit``: each run's ``config_key``, ``seed_group``,
    ``device``, ``model_family``, ``nproc``, ``nnodes``, ``simulated``, ``config`` (parsed),
    ``started_at``, its wall time ``wall_s`` and, over its repeats, ``n_repeats``, the windows'
    ``window_s`` and ``flops`` and the median step ``step_p50_s`` (None without results).
    Read-only, waiting up to ``timeout_s`` for a writer to let go (then StoreError); an absent
    file is no runs (and is not created)."""
    path = Path(db_path)
    if not path.exists():
        return []

    def query(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
        runs = _columns(con, "runs")
        sql = views.MACHINE_RUN_TIMES.format(
            seed_group="r.seed_group" if "seed_group" in runs else "NULL",
            simulated="COALESCE(r.simulated, false)" if "simulated" in runs else "false",
        )
        return _fetch_dicts(con, sql, [host, cpu_model, cores, limit])

    return _read(path, query, timeout_s=timeout_s)


def power_samples(db_path: str | Path, run_id: str) -> pd.DataFrame:
    """The power time series of one run (exact id), ordered by repeat, rank, time."""
    return read_frame(
        db_path,
        "SELECT * FROM power_samples WHERE run_id = ? ORDER BY repeat, rank, component, t_s",
        [run_id],
    )


def unfinished_runs(db_path: str | Path) -> pd.DataFrame:
    """Runs still marked 'running' (their launcher is writing, or was killed), oldest first."""
    return read_frame(db_path, "SELECT * FROM runs WHERE status = 'running' ORDER BY started_at")


#: what `run_totals` sums over a run's repeats
TOTALLED = ("seconds", "energy_j", "energy_cpu_j", "energy_gpu_j", "energy_dram_j", "co2_g")


def run_totals(db_path: str | Path) -> pd.DataFrame:
    """One row per ok run, oldest first: what it is and where it ran (``run_id``, ``suite``,
    ``workload``, ``config_key``, ``started_at``, ``finished_at``, ``region``, ``hardware``,
    ``versions``, ``energy_source``, ``simulated``) and the sums of its repeats' `TOTALLED`
    figures, each NULL where a repeat lacks it (a partial sum is no run's figure), or where the
    database is older than the column. What CodeCarbon's export reads
    (`greenbench.reporting.interchange`)."""

    def query(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
        runs, results = _columns(con, "runs"), _columns(con, "results")

        def total(c: str) -> str:
            if c not in results:
                return f"NULL AS {c}"
            return f"CASE WHEN count(re.{c}) = count(*) THEN sum(re.{c}) END AS {c}"

        simulated = "ru.simulated" if "simulated" in runs else "NULL"
        sql = (
            "SELECT ru.run_id, ru.suite, ru.workload, ru.config_key, ru.started_at, "
            "ru.finished_at, ru.region, ru.hardware, ru.versions, ru.energy_source, "
            f"{simulated} AS simulated, {', '.join(total(c) for c in TOTALLED)} "
            "FROM runs ru JOIN results re USING (run_id) WHERE ru.status = 'ok' "
            "GROUP BY ALL ORDER BY ru.started_at, ru.run_id"
        )
        return con.execute(sql).df()

    return _read(Path(db_path), query, timeout_s=8.0)


EXPORT_FORMATS = ("csv", "json", "parquet")


def export(db_path: str | Path, fmt: str, out: str | Path, *, force: bool = False) -> list[Path]:
    """Write runs joined with their results (one row per repeat; runs without results keep one
    row of NULL results) to one file; ``out`` is a file path or an existing directory (then
    ``greenbench.<fmt>`` inside it). ``energy_source``/``energy_measured`` are per repeat;
    ``trust`` and ``interval`` say how far to trust each repeat (`greenbench.vocabulary.trust`:
    the markers every view prints, and what its run's repeats allow).

    Returns the absolute path written. An existing file is replaced only with ``force``; the
    file is written under a temporary name beside it and renamed when complete, so a failure
    (a full disk, an unwritable folder) leaves no partial file (``greenbench.outputs``)."""
    if fmt not in EXPORT_FORMATS:
        raise StoreError(f"unknown export format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}")
    out = Path(out)
    target = out / f"greenbench.{fmt}" if out.is_dir() else out
    if not target.parent.is_dir():
        raise StoreError(f"cannot export to {target}: directory {target.parent} does not exist")
    target = resolve_target(target, kind="file", force=force)
    if Path(db_path).exists() and target.exists() and target.samefile(db_path):
        raise OutputError(f"{target} is the results database itself: export to another file")
    # DuckDB's COPY writes doubles at full precision and JSON columns as nested JSON
    options = {"csv": "FORMAT csv, HEADER", "json": "FORMAT json, ARRAY true"}

    def write(con: duckdb.DuckDBPyConnection, tmp: Path) -> None:
        runs, repeats = _columns(con, "runs"), _columns(con, "results")
        stored = runs | repeats
        # a column of both tables is the repeat's where the run has one (its energy source,
        # its target loss), else the run's
        both = sorted((runs & repeats) - {"run_id"})
        results = f"re.* EXCLUDE (run_id, {', '.join(both)})"
        peaks = ""
        if "mfu_note" in stored:
            # MFU against the machine's peak, the run's own beside it (views' module docstring)
            exclude = ("run_id", *both)
            results = views.mfu_star("re", "ru", "p", exclude, causal=views.CAUSAL_MFU in stored)
            peaks = f" LEFT JOIN {views.MACHINE_PEAKS} p USING (run_id)"
            stored |= set(views.PEAK_COLUMNS)
        either = "".join(f"COALESCE(re.{c}, ru.{c}) AS {c}, " for c in both)
        sql = (
            f"SELECT ru.* EXCLUDE ({', '.join(both)}), {either}"
            f"{results}, count(re.repeat) OVER (PARTITION BY ru.run_id) AS n_repeats "
            f"FROM runs ru LEFT JOIN results re USING (run_id){peaks}"
        )
        sql = (
            f"SELECT e.* EXCLUDE (n_repeats), {_trust_sql(con, 'e', stored)} FROM ({sql}) e "
            "ORDER BY e.started_at, e.run_id, e.repeat"
        )
        con.execute(f"COPY ({sql}) TO ? ({options.get(fmt, 'FORMAT parquet')})", [str(tmp)])

    with atomic_file(target) as tmp:
        _read(Path(db_path), lambda con: write(con, tmp), timeout_s=8.0)
    return [target]


#: what `Trust.of` reads from an exported row, with each column's SQL type
_TRUST_INPUTS = {
    "energy_source": "VARCHAR", "energy_measured": "BOOLEAN", "simulated": "BOOLEAN",
    "contended": "BOOLEAN", "others_busy_cores": "DOUBLE", "other_greenbench": "INTEGER",
    "idle_power_w": "DOUBLE", "idle_note": "VARCHAR", "peak_flops_source": "VARCHAR",
    "peak_consistent": "BOOLEAN", "peak_note": "VARCHAR", "n_repeats": "INTEGER",
    "status": "VARCHAR",
}  # fmt: skip


def _trust_sql(con: duckdb.DuckDBPyConnection, alias: str, stored: set[str]) -> str:
    """The export's ``trust`` (the trust model's markers; "" for a run not ok) and
    ``interval`` columns, computed by the trust model itself as SQL functions of this
    connection over the row's columns (those a database older than them lacks: NULL)."""

    def trust(  # one parameter per `_TRUST_INPUTS` column: DuckDB counts them
        energy_source: Any,
        energy_measured: Any,
        simulated: Any,
        contended: Any,
        others_busy_cores: Any,
        other_greenbench: Any,
        idle_power_w: Any,
        idle_note: Any,
        peak_flops_source: Any,
        peak_consistent: Any,
        peak_note: Any,
        n_repeats: Any,
        status: Any,
    ) -> str:
        row = dict(locals())
        return Trust.of(row).mark() if status == "ok" else ""

    def interval(n: Any) -> str:
        return interval_for(n or 0).name

    types = list(_TRUST_INPUTS.values())
    con.create_function("greenbench_trust", trust, types, "VARCHAR", null_handling="special")
    con.create_function("greenbench_interval", interval, ["INTEGER"], "VARCHAR",
                        null_handling="special")  # fmt: skip
    args = ", ".join(
        f"{alias}.{c}::{t}" if c in stored or c == "n_repeats" else f"NULL::{t}"
        for c, t in _TRUST_INPUTS.items()
    )
    n = f"{alias}.n_repeats::INTEGER"
    return f"greenbench_trust({args}) AS trust, greenbench_interval({n}) AS interval"


def check_integrity(db_path: str | Path) -> list[str]:
    """Problems found in a results database; an empty list means it is sound.

    Reads every row of every table (DuckDB verifies block checksums on read), then checks the
    references and states the launcher guarantees: results belong to stored runs, every `ok` run
    has results, statuses are known and the schema version is this code's.
    """

    def query(con: duckdb.DuckDBPyConnection) -> list[str]:
        problems = []
        read_every_table(con)
        versions = [v for (v,) in con.execute("SELECT version FROM schema_version").fetchall()]
        if max(versions, default=None) != writer.SCHEMA_VERSION:
            problems.append(f"schema version {versions} is not {writer.SCHEMA_VERSION}")
        statuses = ", ".join(f"'{status}'" for status in writer.RUN_STATUSES)
        checks = [
            (
                f"SELECT count(*) FROM {table} t WHERE t.run_id NOT IN (SELECT run_id FROM runs)",
                f"{table} row(s) belong to no run",
            )
            for table in ("results", "rank_results", "power_samples")
        ]
        checks += [
            (
                "SELECT count(*) FROM runs WHERE status = 'ok' AND run_id NOT IN "
                "(SELECT run_id FROM results)",
                "ok run(s) without results",
            ),
            (
                f"SELECT count(*) FROM runs WHERE status NOT IN ({statuses})",
                "run(s) with an unknown status",
            ),
        ]
        for sql, what in checks:
            (n,) = con.execute(sql).fetchone()
            if n:
                problems.append(f"{n} {what}")
        return problems

    return _read(Path(db_path), query, timeout_s=8.0)
