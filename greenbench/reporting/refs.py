"""Resolve a REF (run id, git sha, run label, or exported results file) into result rows.

``greenbench compare`` and ``greenbench report`` name the results they read by a REF. A REF is
tried, in this order, as: a path to a file written by ``greenbench export`` (csv, json or
parquet); an exact run id; an exact label (``greenbench run --label``); an exact git sha; then a
unique prefix of a run id or a git sha (at least 4 characters). Anything else, or a prefix that
matches more than one run id or sha, is a usage error that says how to find a valid REF.

The returned frame has one row per repeat of every ``ok`` run matched: the ``results`` columns
joined with the ``runs`` columns that define a configuration. Its ``attrs["ref_kind"]`` says how
the REF resolved (``file``, ``run``, ``label``, ``sha``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from greenbench.errors import SpecError
from greenbench.reporting.repeats import read_repeats, stored_columns
from greenbench.store import read_frame, views
from greenbench.vocabulary import SAME_CONFIGURATION, TARGET_FIGURES

RUN_COLUMNS = (
    "run_id",
    "suite",
    "workload",
    "config_name",
    "config_key",
    "model_family",
    "model_size",
    "strategy",
    "layout",
    "device",
    "device_type",
    "nproc",
    "nnodes",
    "precision",
    "seq_len",
    "lengths",
    "label",
    "git_sha",
    "git_branch",  # what `compare --history` may draw history by (schema version 16 on)
    "started_at",
    "host",
    "peak_flops_source",
    "seed_group",  # what `compare` pools seeds by (schema version 13 on)
)
RESULT_COLUMNS = (
    "repeat",
    "tokens",
    "seconds",
    "tokens_per_s",
    "energy_source",
    "energy_measured",
    "energy_j",
    "energy_net_j",
    "joules_per_token",
    "net_joules_per_token",
    "flops",
    "mfu",
    "flops_causal",
    "mfu_causal",
    "peak_mem_bytes",
    "step_time_p50_s",
    "step_time_p95_s",
    "wait_fraction",
    "co2_g",
    "loss",
    # a run to a target loss (schema version 13 on): its figures to target, `compare` judges
    "target_loss",
    "target_reached",
    *TARGET_FIGURES,
    "best_val_loss",
)
#: what the trust model reads (`greenbench.vocabulary.trust`), where the database has it: a
#: column an older schema lacks reads as missing (unknown)
TRUST_COLUMNS = (
    "contended", "others_busy_cores", "other_greenbench", "simulated", "idle_power_w",
    "idle_note", "peak_consistent", "peak_note",
)  # fmt: skip
# results are only ever compared within one "same configuration"
KEY_COLUMNS = SAME_CONFIGURATION
_REQUIRED_IN_FILES = ("run_id", "workload", *KEY_COLUMNS)
_STRING_IDS = ("run_id", "config_key", "git_sha", "git_branch", "label", "config_name")

_MIN_PREFIX = 4


def query_results(
    db_path: str | Path,
    match: str | None = None,
    value: str | None = None,
    known: set[str] | None = None,
) -> pd.DataFrame:
    """All repeats of ok runs, or of those ``match`` (a `views.MATCHES` name) names, with the
    trust columns the database has (``known``: its `repeats.stored_columns`, if read)."""
    columns = (*RUN_COLUMNS, *RESULT_COLUMNS, *TRUST_COLUMNS)
    return read_repeats(db_path, columns, match, value, known)


def load_ref(db_path: str | Path, ref: str) -> pd.DataFrame:
    """The repeats a REF names (see the module docstring for the resolution order)."""
    ref = ref.strip()
    if not ref:
        raise SpecError("empty REF: give a run id, a git sha, a --label value or an exported file")
    path = Path(ref)
    if path.suffix.lower() in {".csv", ".json", ".parquet"} or path.is_file():
        return _tag(load_exported(path), "file")
    known = stored_columns(db_path)
    for kind in ("run", "label", "sha"):
        df = query_results(db_path, kind, ref, known)
        if len(df):
            return _tag(df, kind)
    if len(ref) >= _MIN_PREFIX:
        by_run = query_results(db_path, "run_prefix", ref, known)
        by_sha = query_results(db_path, "sha_prefix", ref, known)
        run_ids = sorted(set(by_run["run_id"]))
        shas = sorted(set(by_sha["git_sha"].dropna()))
        if len(run_ids) + len(shas) > 1:
            shown = ", ".join([*(f"run {r}" for r in run_ids[:5]), *(f"sha {s}" for s in shas[:5])])
            raise SpecError(f"REF {ref!r} is ambiguous ({shown}): give more characters")
        if run_ids:
            return _tag(by_run, "run")
        if shas:
            return _tag(by_sha, "sha")
    failed = read_frame(db_path, views.COUNT_RUNS_NAMED, [ref, ref, ref])
    if int(failed["n"].iloc[0]):
        raise SpecError(f"REF {ref!r} names runs but none finished ok: see `greenbench list runs`")
    raise SpecError(
        f"REF {ref!r} matches no run id, git sha, label or exported file: "
        "see `greenbench list runs`"
    )


def load_exported(path: Path) -> pd.DataFrame:
    """Read a ``greenbench export`` file: runs joined with results, one row per repeat.

    Rows of runs that did not finish ok (exported with NULL results) are dropped. JSON may be a
    list of row objects (what ``greenbench export`` writes) or an object with ``runs`` and
    ``results`` lists, joined on run_id here.
    """
    if not path.is_file():
        raise SpecError(f"exported results file {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            df = pd.read_parquet(path)
        elif suffix == ".csv":
            # ids and hashes that happen to be all digits must stay strings
            df = pd.read_csv(path, dtype={c: str for c in _STRING_IDS})
        else:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and {"runs", "results"} <= set(data):
                runs = pd.DataFrame(data["runs"])
                res = pd.DataFrame(data["results"])
                dup = [c for c in res.columns if c in runs.columns and c != "run_id"]
                df = res.merge(runs.drop(columns=dup), on="run_id", how="inner")
            else:
                df = pd.DataFrame(data)
    except (ValueError, OSError) as exc:
        raise SpecError(f"cannot read exported results {path}: {exc}") from exc
    if "status" in df.columns:  # `greenbench export` keeps failed runs, with NULL results
        df = df[df["status"] == "ok"]
    if "repeat" in df.columns:
        df = df[df["repeat"].notna()]
    missing = [c for c in _REQUIRED_IN_FILES if c not in df.columns]
    if missing:
        raise SpecError(
            f"{path} lacks columns {', '.join(missing)}: export it with `greenbench export`"
        )
    if "started_at" in df.columns:
        df["started_at"] = pd.to_datetime(df["started_at"])
    return df.reset_index(drop=True)


def latest_sha_per_config(df: pd.DataFrame) -> pd.DataFrame:
    """Per configuration, keep only the runs of the git sha whose run started last.

    A label such as ``main`` accumulates runs across commits; comparing against it means
    comparing against its newest commit, not a pool of every commit it ever named.
    """
    if df.empty or "git_sha" not in df.columns or "started_at" not in df.columns:
        return df
    sha = df["git_sha"].fillna("")
    keep = pd.Series(False, index=df.index)
    for _, group in df.groupby(list(KEY_COLUMNS), dropna=False):
        newest = sha[group["started_at"].idxmax()]
        keep[group.index[sha[group.index] == newest]] = True
    return df[keep]


def newest_run_per_config(df: pd.DataFrame) -> pd.DataFrame:
    """Per configuration, keep only the run that started last (history mode's "new result")."""
    if df.empty or "started_at" not in df.columns:
        return df
    started = df.groupby("run_id")["started_at"].min()
    keep = set()
    for _, group in df.groupby(list(KEY_COLUMNS), dropna=False):
        runs = started[group["run_id"].unique()]
        keep.add(runs.idxmax())
    return df[df["run_id"].isin(keep)]


def _tag(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    df = df.reset_index(drop=True)
    df.attrs["ref_kind"] = kind
    return df
