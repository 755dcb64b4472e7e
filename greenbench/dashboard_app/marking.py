"""How numbers are shown, and how estimated energy is marked wherever it appears.

An energy figure (J/token, CO2) from the estimate source is written "≈ 0.051 (est.)" on an amber
background, and its source column says "≈ estimate": it is never formatted like a measurement.
Numeric columns keep their numbers underneath the formatting, so sorting stays numeric.
"""

from __future__ import annotations

import math

import pandas as pd
from pandas.io.formats.style import Styler

from greenbench import vocabulary

ESTIMATE_NOTE = (
    "≈ … (est.) marks **estimated energy**: a TDP × utilisation model, used where no energy "
    "counter exists. It is not a measurement; compare it only with other estimates."
)
CI_NOTE = (
    "CI: distribution-free 95 % interval of the median; with fewer than 6 repeats it is the "
    "range of the repeats (lower coverage). MFU basis says which peak MFU divides by."
)
ESTIMATE_BG = "background-color: rgba(255, 170, 0, 0.18)"

#: leaderboard columns that carry (or derive from) an energy figure
ENERGY_DISPLAY = ("J/token", "J/token net", "J/token CI", "CO2 g/M tok")


def fmt(value: object) -> str:
    """Compact number: thousands separators above 1000, 4 significant digits below."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "–"  # pd.NA: a missing value in a nullable integer column (e.g. state_bytes)
    v = float(value)  # type: ignore[arg-type]
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.4g}"


def fmt_ci(low: float, high: float) -> str:
    if math.isnan(low) or math.isnan(high):
        return "–"
    return f"{fmt(low)} – {fmt(high)}"


def energy_label(source: object, measured: object) -> str:
    """The vocabulary's label, marked '≈ estimate' when it is one."""
    return mark_label(vocabulary.energy_label(source, measured), bool(measured))


def mark_label(label: str, measured: bool) -> str:
    """'≈ ' before the label of an estimate, so it is never read as a measurement."""
    return label if measured else f"≈ {label}"


def mark(text: str, measured: bool) -> str:
    """'≈ text (est.)' for an estimate (once: text already marked stays as it is)."""
    return text if measured or text == "–" or text.startswith("≈") else f"≈ {text} (est.)"


def row_ids(board: pd.DataFrame) -> pd.Series:
    """Stable id of a board row: configuration, hardware and energy source."""
    return (
        board["config_key"].astype(str)
        + "|"
        + board["device_type"].astype(str)
        + "|"
        + board["energy_source"].astype(str)
    )


def with_labels(board: pd.DataFrame) -> pd.DataFrame:
    """Add ``row_id``, ``energy`` ('measured (rapl)' / '≈ estimate') and ``energy_kind``."""
    out = board.copy()
    out["row_id"] = row_ids(out)
    out["energy"] = [
        energy_label(s, m)
        for s, m in zip(out["energy_source"], out["energy_measured"], strict=True)
    ]
    out["energy_kind"] = ["measured" if m else "≈ estimate" for m in out["energy_measured"]]
    return out


def leaderboard_table(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard as shown: readable columns, numbers kept numeric for sorting."""
    return pd.DataFrame(
        {
            "configuration": board["config_name"],
            "energy": [
                energy_label(s, m)
                for s, m in zip(board["energy_source"], board["energy_measured"], strict=True)
            ],
            "J/token": board["joules_per_token"],
            "J/token net": board["net_joules_per_token"],
            "tokens/s": board["tokens_per_s"],
            "MFU %": board["mfu"] * 100.0,
            "peak mem MiB": board["peak_mem_bytes"] / 2**20,
            "CO2 g/M tok": board["co2_g_per_mtok"],
            "repeats": board["n_repeats"],
            "J/token CI": [
                fmt_ci(lo, hi)
                for lo, hi in zip(
                    board["joules_per_token_ci_low"], board["joules_per_token_ci_high"], strict=True
                )
            ],
            "tokens/s CI": [
                fmt_ci(lo, hi)
                for lo, hi in zip(
                    board["tokens_per_s_ci_low"], board["tokens_per_s_ci_high"], strict=True
                )
            ],
            "workload": board["workload"],
            "model": board["model_family"] + "/" + board["model_size"],
            "strategy": board["strategy"],
            "layout": board["layout"],
            "devices": board["devices"].astype(str) + " × " + board["device_type"],
            "precision": board["precision"],
            "MFU basis": board["peak_flops_source"].fillna("–"),
            "git sha": board["git_sha"],
            "run": board["latest_run_id"],
        }
    ).reset_index(drop=True)


def style_marked(
    table: pd.DataFrame, measured: pd.Series, energy_columns: tuple[str, ...]
) -> Styler:
    """Format every number; mark the energy cells of estimated rows."""
    measured = measured.astype(bool).reset_index(drop=True)
    numeric = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
    styler = table.style.format(fmt, subset=numeric)
    estimated = list(table.index[~measured.to_numpy()])
    if estimated:
        cols = [c for c in energy_columns if c in table.columns]
        rows = pd.IndexSlice[estimated, cols]
        num_cols = [c for c in cols if c in numeric]
        if num_cols:
            styler = styler.format(
                lambda v: mark(fmt(v), False), subset=pd.IndexSlice[estimated, num_cols]
            )
        text_cols = [c for c in cols if c not in numeric]
        if text_cols:
            styler = styler.format(
                lambda v: mark(str(v), False), subset=pd.IndexSlice[estimated, text_cols]
            )
        styler = styler.map(lambda _: ESTIMATE_BG, subset=rows)
        if "energy" in table.columns:
            styler = styler.map(lambda _: ESTIMATE_BG, subset=pd.IndexSlice[estimated, ["energy"]])
    return styler
