"""Useful tokens: per repeat, the share of the window's (token, block) work that ran
(``visited_share``), the tokens as full-model work (``useful_tokens`` = tokens × that share),
the FLOPs of that work (``useful_flops``), and the figures over them (``useful_tokens_per_s``,
``joules_per_useful_token``). A SkipPipe run whose microbatches skip stages reads every token
but trains each through part of the model; tokens/s and J/token count every token as full,
these do not (`greenbench.aggregate`).

Repeats stored before this version:

- of a run that skips nothing (any strategy but SkipPipe, or SkipPipe on a full schedule): every
  token ran every block, so the share is 1 and the useful figures are the plain ones;
- of a SkipPipe run that skips (``skippipe.schedule`` ``skippipe`` or ``random``, or no
  schedule stored: its default skips): the share was not counted, so they stay unknown (NULL).
"""

from __future__ import annotations

import json

import duckdb

DDL = """
ALTER TABLE results ADD COLUMN visited_share DOUBLE;            -- share of (token, block) work run
ALTER TABLE results ADD COLUMN useful_tokens DOUBLE;            -- tokens × visited_share
ALTER TABLE results ADD COLUMN useful_flops DOUBLE;             -- FLOPs of that work
ALTER TABLE results ADD COLUMN useful_tokens_per_s DOUBLE;      -- useful_tokens ÷ seconds
ALTER TABLE results ADD COLUMN joules_per_useful_token DOUBLE;  -- energy_j ÷ useful_tokens
"""

FULL = """
UPDATE results
SET visited_share = 1.0,
    useful_tokens = tokens,
    useful_flops = flops,
    useful_tokens_per_s = tokens_per_s,
    joules_per_useful_token = joules_per_token
WHERE run_id = ?
"""

#: the schedules that skip nothing, as stored before this version
FULL_SCHEDULES = ("full", "full-aware")


def skipped(strategy: object, config: object) -> bool:
    """Whether a stored run's microbatches skipped stages (its SkipPipe schedule skips)."""
    if strategy != "skippipe":
        return False
    try:
        data = json.loads(config) if isinstance(config, str) else config
    except ValueError:
        return True  # unreadable: not known to skip nothing
    settings = data.get("settings") if isinstance(data, dict) else None
    schedule = settings.get("skippipe.schedule") if isinstance(settings, dict) else None
    return schedule not in FULL_SCHEDULES


def apply(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(DDL)
    runs = con.execute(
        "SELECT run_id, strategy, CAST(config AS VARCHAR) FROM runs "
        "WHERE run_id IN (SELECT DISTINCT run_id FROM results)"
    ).fetchall()
    full = [[run_id] for run_id, strategy, config in runs if not skipped(strategy, config)]
    if full:
        con.executemany(FULL, full)
