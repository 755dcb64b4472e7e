"""How numbers are shown, and how estimated energy and the trust model are marked.

An energy figure (J/token, CO2) from the estimate source is written "≈ 0.051 (est.)" on an amber
background, and its source column says "≈ estimate": it is never formatted like a measurement.
Numeric columns keep their numbers underneath the formatting, so sorting stays numeric. Every
table of configurations has a ``trust`` column with the trust model's markers
(`greenbench.vocabulary.trust`: ``⚠ contended``, unknown net energy, too few repeats for a 95 %
interval), and intervals are named for what they are (`interval_note`).
"""

from __future__ import annotations

import math

import pandas as pd
from pandas.io.formats.style import Styler

from greenbench import vocabulary
from greenbench.vocabulary import trust

ESTIMATE_NOTE = (
    "≈ … (est.) marks **estimated energy**: a TDP × utilisation model, used where no energy "
    "counter exists. It is not a measurement; compare it only with other estimates."
)
TRUST_NOTE = (
    f"Trust: **{trust.CONTENDED}** measured while other processes or another greenbench run "
    "shared the machine (figures may be skewed; the sidebar hides them); "
    f"**{trust.IDLE_MARK}** net energy unknown, its idle baseline sampled on a busy machine or "
    "above the run's mean power; **min–max of N** fewer repeats than a 95 % interval needs "
    f"({trust.repeats_for_interval()}). MFU basis says which peak MFU divides by."
)
ESTIMATE_BG = "background-color: rgba(255, 170, 0, 0.18)"
CONTENDED_BG = "background-color: rgba(220, 50, 50, 0.15)"

#: leaderboard columns that carry (or derive from) an energy figure
ENERGY_DISPLAY = ("J/token", "J/token net", "J/token interval", "CO2 g/M tok")


def interval_note(n_repeats: pd.Series) -> str:
    """What the interval columns of rows with these repeat counts hold, in words."""
    return f"Interval: {trust.interval_caption(int(n) for n in n_repeats)}."


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
            "trust": board["trust"],
            "interval": board["interval"],
            "J/token interval": [
                fmt_ci(lo, hi)
                for lo, hi in zip(
                    board["joules_per_token_ci_low"], board["joules_per_token_ci_high"], strict=True
                )
            ],
            "tokens/s interval": [
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
    """Format every number; mark the energy cells of estimated rows, and the ``trust`` cell of
    a contended row."""
    measured = measured.astype(bool).reset_index(drop=True)
    numeric = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
    styler = table.style.format(fmt, subset=numeric)
    if "trust" in table.columns:
        busy = list(table.index[table["trust"].fillna("").str.contains(trust.CONTENDED)])
        if busy:
            styler = styler.map(lambda _: CONTENDED_BG, subset=pd.IndexSlice[busy, ["trust"]])
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
