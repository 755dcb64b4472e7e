"""Named read queries over the results database, for the readers that are not the store: REF
resolution (compare, report), the dashboard, and `--resume`. The store package holds all SQL;
readers run these through `read_frame` (read-only, open-query-close).

**MFU is read against one peak per machine and thread count.** A CPU's peak is a GEMM calibration
(`greenbench.hardware.cpu_peak`) and each run stores the one it was given, which load on the
machine may have pulled down: two runs of one configuration stored 1.04e10 and 4.21e10 FLOP/s,
MFU 17.9 % and 6.1 %, and could not be pooled. So every reader here reads ``mfu`` against the
**machine's peak**: the highest calibration any run stored for the same host, CPU model, logical
cores, threads per rank (cores ÷ ranks per node, as the launcher sets them) and precision (a
calibration can only come out too low, never too high), recomputed at read time from the stored
FLOPs, seconds and devices (`MACHINE_PEAKS`, `mfu_columns`). The run's own figure stays stored
and readable (``mfu_own_peak``); where its stored peak is lower than the machine's,
``peak_consistent`` is false and ``peak_note`` and ``mfu_note`` say so, with both peaks. An MFU
above 1 against the machine's peak is unknown (NULL) with its reason, never shown or clamped.
GPU runs (datasheet peaks) and a user's own loop or process (whose thread count is torch's own,
not stored) read their stored MFU unchanged, ``peak_consistent`` NULL (not checked). ``mfu`` is
PaLM's convention and ``mfu_causal`` the causal one (`greenbench.vocabulary.flops`), each read
the same way from its own FLOPs.
"""

from __future__ import annotations

from collections.abc import Sequence

from greenbench.vocabulary import OWN_MEASUREMENT_KINDS

#: columns of the ``results`` table other than run_id: a repeat row takes these from the
#: results (energy_source and energy_measured exist in both tables; the repeat's own wins)
RESULT_TABLE_COLUMNS = frozenset(
    {
        "repeat", "tokens", "seconds", "tokens_per_s", "energy_source", "energy_measured",
        "energy_j", "energy_net_j", "energy_gpu_j", "energy_cpu_j", "energy_dram_j",
        "idle_power_w", "joules_per_token", "net_joules_per_token", "flops", "mfu",
        "flops_causal", "mfu_causal",
        "peak_mem_bytes", "step_time_p50_s", "step_time_p95_s", "wait_fraction", "wait_energy_j",
        "co2_g", "loss", "energy_note", "step_times_s", "mfu_note", "state_bytes",
        "gpu_power_avg_w", "gpu_power_peak_w", "energy_node_j", "energy_node_source",
        "energy_node_note", "energy_host_source", "idle_note", "visited_share", "useful_tokens",
        "useful_flops", "useful_tokens_per_s", "joules_per_useful_token",
        # a run to a target loss (schema version 13 on; ``target_loss`` is the run's too)
        "target_loss", "target_reached", "steps_to_target", "tokens_to_target",
        "seconds_to_target", "energy_to_target_j", "energy_to_target_net_j", "best_val_loss",
        "target_stopped_by", "eval_s", "eval_energy_j",
        # a fault-tolerant run (schema version 14 on)
        "failures", "tokens_trained", "goodput", "redone_s", "redone_j", "restart_s",
        "restart_j", "energy_lost_j", "ckpt_count", "ckpt_s", "ckpt_j", "ckpt_bytes",
    }
)  # fmt: skip

#: a run's seed group (schema version 13 on): its own, else the one another run of the same
#: configuration stored (one configuration has one seed group), else its config_key, a group of
#: its own (runs stored before seed groups were kept, of a configuration not run since)
SEED_GROUP = (
    "coalesce(r.seed_group, (SELECT max(o.seed_group) FROM runs o"
    " WHERE o.config_key = r.config_key), r.config_key)"
)

#: ``hardware.cpu_peak.CPU_GEMM_SOURCE`` (the store imports no torch)
CPU_CALIBRATION = "cpu-gemm-calibration"
#: the ``strategy`` of runs whose threads per rank the store cannot tell (a user's own loop or
#: whole process, at torch's own thread count): never pooled with another run's peak
UNPOOLED_STRATEGIES = tuple(OWN_MEASUREMENT_KINDS)

#: per run with a CPU calibration: its machine (cpu, cores, threads per rank, precision) and the
#: machine's peak, the highest calibration any run stored for it (module docstring)
MACHINE_PEAKS = (
    "(SELECT run_id, cpu, threads, precision, max(peak_flops) OVER (PARTITION BY machine)"
    " AS machine_peak FROM (SELECT run_id, peak_flops, precision,"
    " json_extract_string(hardware, '$.cpu_model') AS cpu,"
    " TRY_CAST(json_extract_string(hardware, '$.logical_cores') AS INTEGER) AS cores,"
    " greatest(1, cores // nproc) AS threads,"
    " concat_ws('|', host, cpu, cores, threads, precision) AS machine"
    f" FROM runs WHERE peak_flops_source = '{CPU_CALIBRATION}' AND peak_flops > 0"
    f" AND nproc > 0 AND strategy NOT IN ({', '.join(repr(s) for s in UNPOOLED_STRATEGIES)}))"
    " WHERE cpu IS NOT NULL AND cores > 0)"
)
#: the columns `mfu_columns` reads (beside the stored results and runs columns)
MFU_COLUMNS = frozenset(
    {"mfu", "mfu_note", "mfu_own_peak", "peak_flops_machine", "peak_consistent", "peak_note"}
)
#: those of them that belong to a run, not to one repeat
PEAK_COLUMNS = ("peak_flops_machine", "peak_consistent", "peak_note")
#: MFU under the causal convention (`greenbench.vocabulary.flops`), read against the machine's
#: peak as ``mfu`` is, where the results table has it (schema version 12 on)
CAUSAL_MFU = "mfu_causal"
#: every column `mfu_columns` reads
READ_AGAINST_MACHINE = MFU_COLUMNS | {CAUSAL_MFU}


def mfu_columns(x: str = "x", r: str = "r", p: str = "p") -> dict[str, str]:
    """SQL of each `READ_AGAINST_MACHINE` column, for results aliased ``x``, runs ``r`` and
    `MACHINE_PEAKS` ``p`` (left-joined on run_id): MFU against the machine's peak (module
    docstring), under PaLM's convention (``mfu``) and the causal one (``mfu_causal``, which
    needs schema version 12). `PEAK_COLUMNS` read runs and ``p`` only."""
    lower = f"({p}.machine_peak > {r}.peak_flops)"  # the run's stored peak is below its machine's
    differs = f"({lower} AND {x}.flops > 0)"
    devices = f"({x}.seconds * {r}.nproc * {r}.nnodes)"
    read = f"(({x}.flops / {devices}) / {p}.machine_peak)"
    read_causal = f"(({x}.flops_causal / {devices}) / {p}.machine_peak)"
    machine = (
        f"printf('%.3g FLOP/s, the highest CPU calibration stored for this machine (%s, %d "
        f"threads per rank, %s)', {p}.machine_peak, {p}.cpu, {p}.threads, {p}.precision)"
    )
    own = (
        f"printf('this run stored a peak of %.3g FLOP/s (a calibration comes out low when other "
        f"processes hold cores, never high)', {r}.peak_flops)"
    )
    stored = f"coalesce(printf('%.1f%%', {x}.mfu * 100), 'unknown')"
    return {
        "mfu": f"CASE WHEN {differs} THEN CASE WHEN {read} <= 1 THEN {read} END ELSE {x}.mfu END",
        "mfu_note": (
            f"CASE WHEN {differs} THEN concat_ws('; ', CASE WHEN {read} > 1 THEN "
            f"printf('MFU unknown: %.0f%% of the machine''s peak, above every calibration "
            f"stored for it', {read} * 100) END, 'MFU against ' || {machine}, {own} || "
            f"', which gave MFU ' || {stored}, nullif({x}.mfu_note, '')) ELSE {x}.mfu_note END"
        ),
        CAUSAL_MFU: (
            f"CASE WHEN {differs} THEN CASE WHEN {read_causal} <= 1 THEN {read_causal} END "
            f"ELSE {x}.mfu_causal END"
        ),
        "mfu_own_peak": f"{x}.mfu",
        "peak_flops_machine": f"coalesce({p}.machine_peak, {r}.peak_flops)",
        "peak_consistent": (
            f"CASE WHEN {p}.machine_peak IS NOT NULL THEN {r}.peak_flops >= {p}.machine_peak END"
        ),
        "peak_note": f"CASE WHEN {lower} THEN {own} || '; MFU is read against ' || {machine} END",
    }


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
    oldest first; each column is taken from the results table if it has one, else from runs,
    but `MFU_COLUMNS` are read against the machine's peak (module docstring) and ``seed_group``
    is `SEED_GROUP` (needs schema version 13)."""
    for column in columns:
        if not column.replace("_", "").isalnum():
            raise ValueError(f"not a column name: {column!r}")
    if match is not None and match not in MATCHES:
        raise ValueError(f"unknown match {match!r}; known: {', '.join(MATCHES)}")
    read = mfu_columns()
    select = ", ".join(
        f"{read[c]} AS {c}" if c in READ_AGAINST_MACHINE
        else f"{SEED_GROUP} AS {c}" if c == "seed_group"
        else f"x.{c}" if c in RESULT_TABLE_COLUMNS
        else f"r.{c}"
        for c in columns
    )  # fmt: skip
    machine = READ_AGAINST_MACHINE & set(columns)
    peaks = f" LEFT JOIN {MACHINE_PEAKS} p USING (run_id)" if machine else ""
    where = " AND " + MATCHES[match] if match else ""
    return (
        f"SELECT {select} FROM runs r JOIN results x USING (run_id){peaks}"
        f" WHERE r.status = 'ok'{where} ORDER BY r.started_at, x.repeat"
    )


COUNT_RUNS_NAMED = "SELECT count(*) AS n FROM runs WHERE run_id = ? OR label = ? OR git_sha = ?"
FINISHED_CONFIGS = "SELECT DISTINCT config_key, label FROM runs WHERE status = 'ok'"
#: one machine's ok runs (host, CPU model, logical cores), newest first, with their wall time
#: (started → finished: idle baseline, rank start, warm-up, every window, storing) and their
#: windows' seconds, FLOPs and median step (`queries.machine_run_times`; the seed group and the
#: simulated mark, added by later schema versions, are filled in where the file lacks them)
MACHINE_RUN_TIMES = (
    "SELECT r.run_id, r.config_key, {seed_group} AS seed_group, r.device, r.model_family,"
    " r.nproc, r.nnodes, {simulated} AS simulated, r.config, r.started_at,"
    " epoch(r.finished_at) - epoch(r.started_at) AS wall_s, x.n_repeats, x.window_s, x.flops,"
    " x.step_p50_s FROM runs r LEFT JOIN (SELECT run_id, count(*) AS n_repeats,"
    " sum(seconds) AS window_s, sum(flops) AS flops, median(step_time_p50_s) AS step_p50_s"
    " FROM results GROUP BY run_id) x USING (run_id)"
    " WHERE r.status = 'ok' AND r.finished_at IS NOT NULL AND r.host = ?"
    " AND json_extract_string(r.hardware, '$.cpu_model') = ?"
    " AND TRY_CAST(json_extract_string(r.hardware, '$.logical_cores') AS INTEGER) = ?"
    " ORDER BY r.started_at DESC LIMIT ?"
)
RUNS_COLUMNS = "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'"
#: the columns of ``runs`` and ``results`` (readers of older schemas leave out what is missing)
STORED_COLUMNS = (
    "SELECT table_name, column_name FROM information_schema.columns"
    " WHERE table_name IN ('runs', 'results') AND table_schema = 'main'"
)
TABLE_NAMES = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
STATUS_COUNTS = "SELECT status, count(*) AS n FROM runs GROUP BY status"
RUNS_OF_CONFIG = (
    "SELECT run_id, status, git_sha, label, energy_source, started_at, error FROM runs"
    " WHERE config_key = ? ORDER BY started_at DESC"
)
RUN_RECORD = "SELECT * FROM runs WHERE run_id = ?"
#: one run's validation curves (a run to a target loss; schema version 13 on), per repeat
VAL_CURVE = (
    "SELECT repeat, step, tokens, seconds, joules, val_loss FROM val_curve WHERE run_id = ?"
    " ORDER BY repeat, step"
)
#: one run's events (checkpoints, failures, restarts; schema version 14 on), in order
RUN_EVENTS = (
    "SELECT repeat, seq, kind, step, rank, t_s, seconds, joules, tokens, bytes, note"
    " FROM run_events WHERE run_id = ? ORDER BY repeat, seq"
)


def mfu_star(
    x: str = "x",
    r: str = "r",
    p: str = "p",
    exclude: Sequence[str] = (),
    extra: bool = True,
    causal: bool = True,
) -> str:
    """``x.*`` (the results columns but ``exclude``) with MFU read against the machine's peak
    (``causal``: the causal convention's too, for a results table that has it, schema version
    12 on) and (``extra``) the other `MFU_COLUMNS` beside, for a query joining runs ``r`` and
    `MACHINE_PEAKS` ``p``."""
    read = mfu_columns(x, r, p)
    more = "".join(f", {read[c]} AS {c}" for c in sorted(MFU_COLUMNS - {"mfu", "mfu_note"}))
    dropped = f" EXCLUDE ({', '.join(exclude)})" if exclude else ""
    replaced = ["mfu", "mfu_note", *([CAUSAL_MFU] if causal else [])]
    replace = ", ".join(f"{read[c]} AS {c}" for c in replaced)
    return f"{x}.*{dropped} REPLACE ({replace})" + (more if extra else "")


def results_of_run_sql(
    exclude: Sequence[str] = ("run_id", "step_times_s"), extra: bool = True, causal: bool = True
) -> str:
    """Every repeat of one run (``?``: its exact id): its results columns but ``exclude``, MFU
    read against the machine's peak (`mfu_star`). Needs a results table with ``mfu_note``
    (schema version 4 on) and, with ``causal``, ``mfu_causal`` (version 12 on)."""
    star = mfu_star(exclude=exclude, extra=extra, causal=causal)
    return (
        f"SELECT {star} FROM results x JOIN runs r "
        f"USING (run_id) LEFT JOIN {MACHINE_PEAKS} p USING (run_id) WHERE x.run_id = ? "
        "ORDER BY x.repeat"
    )


RUN_RESULTS = results_of_run_sql()
#: `RUN_RESULTS` for a database with the MFU notes but older than the causal count
RUN_RESULTS_BEFORE_CAUSAL = results_of_run_sql(causal=False)
#: `RUN_RESULTS` as stored, for a database older than the MFU notes (readers do not migrate)
RUN_RESULTS_AS_STORED = (
    "SELECT * EXCLUDE (run_id, step_times_s) FROM results WHERE run_id = ? ORDER BY repeat"
)
#: one run's `PEAK_COLUMNS` (``?``: its exact id)
RUN_PEAK = (
    f"SELECT {', '.join(f'{mfu_columns()[c]} AS {c}' for c in PEAK_COLUMNS)} FROM runs r "
    f"LEFT JOIN {MACHINE_PEAKS} p USING (run_id) WHERE r.run_id = ?"
)
RANK_RESULTS = "SELECT * EXCLUDE (run_id) FROM rank_results WHERE run_id = ? ORDER BY repeat, rank"
POWER_SAMPLES = (
    "SELECT repeat, rank, component, t_s, power_w FROM power_samples WHERE run_id = ?"
    " ORDER BY repeat, rank, component, t_s"
)
