"""The trust model's columns (`greenbench.vocabulary.trust`): how busy the machine was while a
run ran, and whether a repeat's idle baseline can be trusted.

runs: ``others_busy_cores`` (the CPU cores other processes kept busy meanwhile, on average) and
``other_greenbench`` (how many other greenbench runs and ranks were seen: a count, never which),
so no view parses the contention warning. results: ``idle_note``, why the idle baseline is
unreliable ("" when it is not), in which case net energy is NULL: never negative.

Runs stored before this version:

- a contention warning named other greenbench processes by pid and the first 80 characters of
  their command lines (users' paths and labels): it is rewritten to their count, and its figures
  fill the two columns (the count is a lower bound where the warning showed three, all it
  listed);
- a repeat whose net energy was below zero had an idle power above its window's mean power (an
  idle sample taken while the machine was busy): its net energy becomes NULL, with the reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb

VERSION = int(Path(__file__).name[:4])

DDL = """
ALTER TABLE runs ADD COLUMN others_busy_cores DOUBLE;  -- cores other processes kept busy meanwhile
ALTER TABLE runs ADD COLUMN other_greenbench INTEGER;  -- other greenbench runs and ranks seen
ALTER TABLE results ADD COLUMN idle_note VARCHAR;      -- why the idle baseline is unreliable
"""

NEGATIVE_NET = f"""
UPDATE results
SET idle_note = 'idle baseline unreliable: the idle power was above the window''s mean power '
        || '(net energy came out below zero): sampled while the machine was busy (stored before '
        || 'schema version {VERSION})',
    energy_net_j = NULL,
    net_joules_per_token = NULL
WHERE energy_net_j < 0
"""

#: the warning the launcher wrote before this version, with its list of pids and commands
_OLD = re.compile(
    r"other greenbench processes ran meanwhile \((?P<seen>.*)\)"
    r"(?P<rest>(?:; other processes kept [0-9.]+ of [0-9]+ cores busy meanwhile)?"
    r" \(figures may be skewed\))$",
    re.DOTALL,
)
_PID = re.compile(r"(?:^|; )\d+: ")
_BUSY = re.compile(r"other processes kept (?P<cores>[0-9.]+) of [0-9]+ cores busy meanwhile")
_LISTED = 3  # the old warning listed at most this many processes


def scrubbed(warning: str) -> tuple[str, int | None, float | None]:
    """The warning without pids or command lines, the count of other greenbench processes it
    named (None: none) and the busy cores it gave (None: none)."""
    busy = _BUSY.search(warning)
    cores = float(busy["cores"]) if busy else None
    old = _OLD.search(warning)
    if old is None:
        return warning, None, cores
    count = max(1, len(_PID.findall(old["seen"])))
    many = "at least " if count >= _LISTED else ""
    what = f"{many}{count} other greenbench process{'es' if count != 1 else ''} ran meanwhile"
    return warning[: old.start()] + what + old["rest"], count, cores


def apply(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(DDL)
    con.execute(NEGATIVE_NET)
    rows = con.execute(
        "SELECT run_id, warnings FROM runs WHERE contended OR CAST(warnings AS VARCHAR) LIKE "
        "'%contended: %'"
    ).fetchall()
    for run_id, warnings in rows:
        texts = json.loads(warnings) if isinstance(warnings, str) else list(warnings or [])
        count = cores = None
        kept = []
        for text in texts:
            if isinstance(text, str) and text.startswith("contended: "):
                text, seen, busy = scrubbed(text)
                count = seen if seen is not None else count
                cores = busy if busy is not None else cores
            kept.append(text)
        con.execute(
            "UPDATE runs SET warnings = ?::JSON, other_greenbench = ?, others_busy_cores = ? "
            "WHERE run_id = ?",
            [json.dumps(kept) if texts else None, count, cores, run_id],
        )
