"""Named read queries over the results database, for the readers that are not the store: REF
resolution (compare, report), the dashboard, and `--resume`. The store package holds all SQL;
readers run these through `read_frame` (read-only, open-query-close)."""

from __future__ import annotations

from collections.abc import Sequence

#: columns of the ``results`` table other than run_id: a repeat row takes these from the
#: results (energy_source and energy_measured exist in both tables; the repeat's own wins)
RESULT_TABLE_COLUMNS = frozenset(
    {
        "repeat", "tokens", "seconds", "tokens_per_s", "energy_source", "energy_measured",
        "energy_j", "energy_net_j", "energy_gpu_j", "energy_cpu_j", "energy_dram_j",
        "idle_power_w", "joules_per_token", "net_joules_per_token", "flops", "mfu",
        "peak_mem_bytes", "step_time_p50_s", "step_time_p95_s", "wait_fraction", "wait_energy_j",
        "co2_g", "loss", "energy_note", "step_times_s", "mfu_note", "state_bytes",
        "gpu_power_avg_w", "gpu_power_peak_w", "energy_node_j", "energy_node_source",
        "energy_node_note", "energy_host_source", "idle_note",
    }
)  # fmt: skip

#: how a REF may name runs: one placeholder each
MATCHES = {
    "run": "r.run_id = ?",
    "label": "r.label = ?",
    "sha": "r.git_sha = ?",
    "run_prefix": "starts_with(r.run_id, ?)",
    "sha_prefix": "starts_with(r.git_sha, ?)",
}


def ok_repeats_sql(columns: Sequence[str], match: str | None = None) -> str:
    """One row per repeat of every ``ok`` run (those a `MATCHES` condition names, if given),
    oldest first; each column is taken from the results table if it has one, else from runs."""
    for column in columns:
        if not column.replace("_", "").isalnum():
            raise ValueError(f"not a column name: {column!r}")
    if match is not None and match not in MATCHES:
        raise ValueError(f"unknown match {match!r}; known: {', '.join(MATCHES)}")
    select = ", ".join(f"x.{c}" if c in RESULT_TABLE_COLUMNS else f"r.{c}" for c in columns)
    where = " AND " + MATCHES[match] if match else ""
    return (
        f"SELECT {select} FROM runs r JOIN results x USING (run_id)"
        f" WHERE r.status = 'ok'{where} ORDER BY r.started_at, x.repeat"
    )


COUNT_RUNS_NAMED = "SELECT count(*) AS n FROM runs WHERE run_id = ? OR label = ? OR git_sha = ?"
FINISHED_CONFIGS = "SELECT DISTINCT config_key, label FROM runs WHERE status = 'ok'"
RUNS_COLUMNS = "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'"
TABLE_NAMES = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
STATUS_COUNTS = "SELECT status, count(*) AS n FROM runs GROUP BY status"
RUNS_OF_CONFIG = (
    "SELECT run_id, status, git_sha, label, energy_source, started_at, error FROM runs"
    " WHERE config_key = ? ORDER BY started_at DESC"
)
RUN_RECORD = "SELECT * FROM runs WHERE run_id = ?"
RUN_RESULTS = (
    "SELECT * EXCLUDE (run_id, step_times_s) FROM results WHERE run_id = ? ORDER BY repeat"
)
RANK_RESULTS = "SELECT * EXCLUDE (run_id) FROM rank_results WHERE run_id = ? ORDER BY repeat, rank"
POWER_SAMPLES = (
    "SELECT repeat, rank, component, t_s, power_w FROM power_samples WHERE run_id = ?"
    " ORDER BY repeat, rank, component, t_s"
)
