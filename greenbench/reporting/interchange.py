"""Exports other tools read: CodeCarbon's ``emissions.csv`` and Bencher's metric format (BMF),
beside the store's own csv, json and parquet (`greenbench.store.export`), through one `export`.

**CodeCarbon** (``--format codecarbon``): the columns of CodeCarbon's ``emissions.csv`` in its
order, as the installed CodeCarbon's ``EmissionsData`` declares them
(`greenbench.energy._codecarbon.emissions_columns`), **one row per ok run** (a CodeCarbon row is
one tracked run): ``run_id`` greenbench's, ``project_name`` the run's suite (its workload when it
ran alone), ``experiment_id`` its configuration key, ``timestamp`` when it finished (UTC,
CodeCarbon's ``%Y-%m-%dT%H:%M:%S``). ``duration`` (s) is the sum of its measured windows (the
repeats; start-up, calibration and warm-up are not in them), ``energy_consumed`` and
``cpu_energy``/``gpu_energy``/``ram_energy`` (kWh) the energy of those windows, total and by
component (RAM is the DRAM domain), each power (W) its energy over ``duration``, ``emissions``
(kg CO2eq) the run's CO2 where it has a carbon intensity, ``emissions_rate`` (kg/s) over
``duration``; ``country_iso_code`` and ``country_name`` from an ISO-3 carbon region,
``cloud_provider``, ``cloud_region`` and ``on_cloud`` from a cloud one; ``os``, ``python_version``,
``cpu_model``, ``cpu_count`` (logical cores), ``gpu_count``, ``gpu_model`` and
``ram_total_size`` (GB of 2³⁰ bytes, as CodeCarbon counts) from the run's machine fingerprint;
``pue`` 1 (greenbench applies none). What greenbench does not know is left empty, never
guessed: a figure a repeat lacks (a component its meter does not read) leaves the run's empty,
and so do utilisation, water, coordinates, tracking mode and CodeCarbon's version. Simulated and
emulated runs are left out: their energy is a model's, not a reading.

**Bencher** (``--format bmf``): ``{benchmark: {measure: {"value", "lower_value",
"upper_value"}}}``, one benchmark per leaderboard row (`greenbench.reporting.leaderboard`: a
configuration, its seeds pooled, on its newest commit, one kind of energy figure), named
``workload/configuration (energy)`` (the hardware added, then the seed group, only where two rows
would share a name). Each measure (`BMF_MEASURES`) is the row's median as the leaderboard reports
it, and its bounds the 95 % confidence interval of that median where the repeats allow one
(`greenbench.vocabulary.trust.interval_for`: 6 or more); with fewer there are no bounds (the
leaderboard's min–max range is not a confidence interval), and an unknown figure is no measure.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from greenbench.energy._codecarbon import emissions_columns
from greenbench.energy.carbon import JOULES_PER_KWH, country_name
from greenbench.errors import OutputError, StoreError
from greenbench.outputs import atomic_file, resolve_target
from greenbench.reporting.leaderboard import leaderboard
from greenbench.reporting.refs import query_results
from greenbench.store import EXPORT_FORMATS, run_totals
from greenbench.store import export as store_export
from greenbench.vocabulary import energy_label, is_simulated
from greenbench.vocabulary.trust import interval_for

#: every ``greenbench export --format``: the store's own, then other tools'
FORMATS = (*EXPORT_FORMATS, "codecarbon", "bmf")
#: the file written into a folder given as ``--out``, and the default ``--out``, per format
DEFAULT_NAMES = {fmt: f"results.{fmt}" for fmt in EXPORT_FORMATS} | {
    "codecarbon": "emissions.csv",
    "bmf": "bmf.json",
}

#: leaderboard metric → BMF measure slug (Bencher's measure names: lower case, hyphens)
BMF_MEASURES = {
    "joules_per_token": "joules-per-token",
    "net_joules_per_token": "net-joules-per-token",
    "tokens_per_s": "tokens-per-second",
    "mfu": "mfu",
    "mfu_causal": "mfu-causal",
    "co2_g_per_mtok": "co2-grams-per-million-tokens",
    "step_time_p50_s": "step-time-p50-seconds",
    "wait_fraction": "wait-fraction",
    "peak_mem_bytes": "peak-memory-bytes",
    "loss": "loss",
}

GB = 1024**3  # CodeCarbon's "GB" (its B_TO_GB)


def export(db_path: str | Path, fmt: str, out: str | Path, *, force: bool = False) -> list[Path]:
    """Write ``db_path``'s results in ``fmt`` (`FORMATS`) to ``out``, a file or an existing
    folder (then `DEFAULT_NAMES`' file inside it); returns the absolute paths written. The
    store's formats are `greenbench.store.export`'s; CodeCarbon's and Bencher's are this
    module's (its docstring), written with the same rules: an existing file replaced only with
    ``force``, written under a temporary name and renamed when complete."""
    if fmt in EXPORT_FORMATS:
        return store_export(db_path, fmt, out, force=force)
    writers: dict[str, Callable[[Path], str]] = {
        "codecarbon": lambda db: _csv_text(codecarbon_rows(db)),
        "bmf": lambda db: json.dumps(bmf(db), indent=2, allow_nan=False, ensure_ascii=False),
    }
    if fmt not in writers:
        raise StoreError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    out = Path(out)
    target = out / DEFAULT_NAMES[fmt] if out.is_dir() else out
    if not target.parent.is_dir():
        raise StoreError(f"cannot export to {target}: directory {target.parent} does not exist")
    target = resolve_target(target, kind="file", force=force)
    if Path(db_path).exists() and target.exists() and target.samefile(db_path):
        raise OutputError(f"{target} is the results database itself: export to another file")
    text = writers[fmt](Path(db_path))  # read (and refused) before anything is written
    with atomic_file(target) as tmp:
        tmp.write_text(text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
    return [target]


# --------------------------------------------------------------------------- CodeCarbon


def codecarbon_rows(db_path: str | Path) -> list[dict[str, Any]]:
    """One dict per ok, measured (not simulated) run, keyed by CodeCarbon's ``emissions.csv``
    columns (`emissions_columns`), None where greenbench does not know the value."""
    columns = emissions_columns()
    return [
        {c: row.get(c) for c in columns}
        for row in map(_codecarbon_row, run_totals(db_path).to_dict("records"))
        if row is not None
    ]


def _codecarbon_row(run: dict[str, Any]) -> dict[str, Any] | None:
    """A CodeCarbon row (its column names) from one `greenbench.store.run_totals` record;
    None for a simulated run. Units as CodeCarbon's: s, kWh, W, kg CO2eq, kg/s, GB."""
    if is_simulated(run["energy_source"], run["simulated"]):
        return None
    hardware, versions = _json(run["hardware"]), _json(run["versions"])
    seconds = _number(run["seconds"])
    duration = seconds if seconds is not None and seconds > 0 else None
    row: dict[str, Any] = {
        "timestamp": _timestamp(run["finished_at"]),
        "project_name": run["suite"] or run["workload"],
        "run_id": run["run_id"],
        "experiment_id": run["config_key"],
        "duration": duration,
        "energy_consumed": _kwh(run["energy_j"]),
        "os": hardware.get("os"),
        "python_version": versions.get("python"),
        "cpu_model": hardware.get("cpu_model"),
        "cpu_count": hardware.get("logical_cores"),
        "ram_total_size": _per(hardware.get("memory_bytes"), GB),
        "pue": 1,
    }
    for part, column in (
        ("cpu", "energy_cpu_j"),
        ("gpu", "energy_gpu_j"),
        ("ram", "energy_dram_j"),
    ):
        row[f"{part}_energy"] = _kwh(run[column])
        row[f"{part}_power"] = _per(run[column], duration)
    co2_g = _number(run["co2_g"])
    if co2_g is not None:
        row["emissions"] = co2_g / 1000.0
        row["emissions_rate"] = _per(row["emissions"], duration)
    gpus = hardware.get("gpus")
    if isinstance(gpus, list):
        row["gpu_count"] = len(gpus)
        names = pd.Series([str(g.get("name", "?")) for g in gpus if isinstance(g, dict)])
        row["gpu_model"] = ", ".join(f"{n} x {name}" for name, n in names.value_counts().items())
    row |= _place(str(run["region"] or ""))
    return row


def _place(region: str) -> dict[str, Any]:
    """CodeCarbon's location columns from a greenbench carbon region (`greenbench.energy.carbon`:
    an ISO-3 country code, ``provider:region`` of a cloud, or ``world``)."""
    if ":" in region:
        provider, _, cloud_region = region.partition(":")
        return {"cloud_provider": provider, "cloud_region": cloud_region, "on_cloud": "Y"}
    name = country_name(region) if len(region) == 3 and region.isalpha() else None
    if name is None:
        return {}
    return {"country_iso_code": region.upper(), "country_name": name}


def _csv_text(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(emissions_columns()), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buffer.getvalue()


def _json(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        loaded = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        loaded = None
    return loaded if isinstance(loaded, dict) else {}


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _kwh(joules: Any) -> float | None:
    return _per(joules, JOULES_PER_KWH)


def _per(value: Any, by: Any) -> float | None:
    """``value / by``; None where either is unknown or ``by`` is not positive."""
    a, b = _number(value), _number(by)
    return a / b if a is not None and b is not None and b > 0 else None


def _timestamp(value: Any) -> str | None:
    stamp = pd.Timestamp(value) if value is not None and not pd.isna(value) else None
    return stamp.strftime("%Y-%m-%dT%H:%M:%S") if stamp is not None else None


# --------------------------------------------------------------------------- Bencher


def bmf(db_path: str | Path) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format of the leaderboard (module docstring); StoreError when the
    database has no leaderboard row (no measured training run) to put in it."""
    board = leaderboard(query_results(db_path), scope="latest")
    if board.empty:
        raise StoreError(
            f"{db_path} has no leaderboard row (no ok, measured training run) to export as BMF"
        )
    names = _benchmark_names(board)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, (_, row) in zip(names, board.iterrows(), strict=True):
        samples = row["n_runs"] if row["n_seeds"] > 1 else row["n_repeats"]
        with_bounds = interval_for(int(samples)).kind == "ci"
        measures: dict[str, dict[str, float]] = {}
        for metric, slug in BMF_MEASURES.items():
            value = _number(row.get(metric))
            if value is None:
                continue
            measure = {"value": value}
            low, high = _number(row.get(f"{metric}_ci_low")), _number(row.get(f"{metric}_ci_high"))
            if with_bounds and low is not None and high is not None:
                measure |= {"lower_value": low, "upper_value": high}
            measures[slug] = measure
        if measures:
            out[name] = measures
    return dict(sorted(out.items()))


def _benchmark_names(board: pd.DataFrame) -> list[str]:
    """``workload/configuration (energy)`` per row; where rows share one, their hardware is
    added, and where they still do, their seed group's first characters."""
    labels = [
        energy_label(s, m) for s, m in zip(board.energy_source, board.energy_measured, strict=True)
    ]
    names = [
        f"{w}/{c} ({e})" for w, c, e in zip(board.workload, board.config_name, labels, strict=True)
    ]
    hardware = [
        f"{d}, {n}×{k}, {p}"
        for d, n, k, p in zip(
            board.device_type, board.nproc, board.nnodes, board.precision, strict=True
        )
    ]
    names = _unique(names, hardware)
    return _unique(names, [str(g)[:8] for g in board["seed_group"]])


def _unique(names: list[str], more: list[str]) -> list[str]:
    seen = pd.Series(names).duplicated(keep=False)
    return [f"{n} [{m}]" if dup else n for n, m, dup in zip(names, more, seen, strict=True)]
