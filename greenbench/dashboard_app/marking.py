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
from greenbench.vocabulary.flops import CAUSAL, PALM, SHOWN, flops_header, mfu_header

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
#: the marker of a row that trains only part of the model per token (`trust_cells`)
PARTIAL = "partial model"
#: what a missing value reads in every table (st.dataframe's placeholder: never "None")
MISSING = "–"
#: how each kind of energy figure (`trust.energy_kind`) is named in charts and their legends
KIND_NAMES = {"measured": "measured", "estimated": "≈ estimate", "emulated": "emulated",
              "simulated": "simulated"}  # fmt: skip
#: the labels of modelled energy (never marked "≈ … (est.)": they say what they are)
MODELLED = ("simulated", "emulated")
ESTIMATE_BG = "background-color: rgba(255, 170, 0, 0.18)"
CONTENDED_BG = "background-color: rgba(220, 50, 50, 0.15)"

#: leaderboard columns that carry (or derive from) an energy figure
ENERGY_DISPLAY = ("J/token", "J/token net", "J/token interval", "CO2 g/M tok")


#: human headings of stored columns (`heading`: others get theirs from their unit suffix)
HEADINGS = {
    "tokens_per_s": "tokens/s",
    "joules_per_token": "J/token",
    "net_joules_per_token": "J/token net",
    "mfu": mfu_header(PALM, "%"),
    "mfu_causal": mfu_header(CAUSAL, "%"),
    "co2_g": "CO2 (g)",
    "energy_measured": "measured",
    "energy_net_j": "net energy (J)",
    "energy_j": "energy (J)",
    "wait_fraction": "wait fraction",
    "n_microbatches": "microbatches",
    "flops": flops_header(PALM),
    "flops_causal": flops_header(CAUSAL),
    "local_rank": "local rank",
    "step_time_p50_s": "step time p50 (s)",
    "step_time_p95_s": "step time p95 (s)",
    "seq_len": "sequence length",
    "model_family": "model family",
    "model_size": "model size",
    "device_type": "hardware",
}
#: a stored column's unit suffix: (suffix, unit in the heading, factor the value is shown ×)
UNITS = (("_bytes", "MiB", 2.0**-20), ("_j", "J", 1.0), ("_w", "W", 1.0), ("_s", "s", 1.0),
         ("_g", "g", 1.0))  # fmt: skip
#: stored columns never shown in a table (a list of every step's time: the chart's, not a cell)
HIDDEN = ("step_times_s",)


def heading(column: str) -> str:
    """A stored column's heading: words and its unit ("energy_cpu_j" → "energy cpu (J)",
    "peak_mem_bytes" → "peak mem (MiB)", "tokens_per_s" → "tokens/s")."""
    if column in HEADINGS:
        return HEADINGS[column]
    for suffix, unit, _ in UNITS:
        if column.endswith(suffix):
            return f"{column[: -len(suffix)].replace('_', ' ')} ({unit})"
    return column.replace("_", " ")


def readable(table: pd.DataFrame, keep: tuple[str, ...] = ()) -> pd.DataFrame:
    """``table`` (stored columns) as shown: human headings with units (`heading`), bytes in
    MiB, MFU in %, ``energy_source`` and ``energy_measured`` as one ``energy`` label; columns
    with no value at all (but those in ``keep``: an unknown figure reads "–") and `HIDDEN`
    ones left out."""
    out = {}
    if "energy_source" in table and "energy_measured" in table:
        out["energy"] = [
            energy_label(s, m)
            for s, m in zip(table["energy_source"], table["energy_measured"], strict=True)
        ]
        table = table.drop(columns=["energy_source", "energy_measured"])
    for column in table.columns:
        values = table[column]
        if column in HIDDEN or (column not in keep and values.map(trust.missing).all()):
            continue
        if column in (PALM.mfu_column, CAUSAL.mfu_column):
            values = pd.to_numeric(values, errors="coerce") * 100.0
        for suffix, _, factor in UNITS:
            if column.endswith(suffix) and factor != 1.0:
                values = pd.to_numeric(values, errors="coerce") * factor
        out[heading(column)] = values
    return pd.DataFrame(out, index=table.index).reset_index(drop=True)


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


def text_cell(value: object) -> str:
    """A text cell: "–" where the value is missing (never "None" or "nan")."""
    return MISSING if trust.missing(value) else str(value)


def fmt_ci(low: float, high: float) -> str:
    if math.isnan(low) or math.isnan(high):
        return "–"
    return f"{fmt(low)} – {fmt(high)}"


def energy_label(source: object, measured: object) -> str:
    """The vocabulary's label, marked '≈ estimate' when it is one ("simulated (model)" and
    "emulated (GPU power model)" say what they are already)."""
    label = vocabulary.energy_label(source, measured)
    if label.startswith(MODELLED):
        return label
    return mark_label(label, bool(measured))


def kind_names(frame: pd.DataFrame) -> list[str]:
    """Each row's kind of energy figure as the charts name it (`KIND_NAMES`), from its
    ``energy_source``, ``energy_measured`` and, where present, ``simulated``."""
    flags = frame["simulated"] if "simulated" in frame else [None] * len(frame)
    return [
        KIND_NAMES[trust.energy_kind(s, m, f)]
        for s, m, f in zip(frame["energy_source"], frame["energy_measured"], flags, strict=True)
    ]


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
    out["energy_kind"] = kind_names(out)
    return out


def trust_cells(board: pd.DataFrame) -> list[str]:
    """Each row's trust markers, with ``partial model: skips N % of its stages per token`` first
    where the row trains only part of the model per token (a SkipPipe run skipping stages)."""
    skipped = board["skipped_fraction"] if "skipped_fraction" in board else [0.0] * len(board)
    out = []
    for marks, skip in zip(board["trust"], skipped, strict=True):
        partial = not trust.missing(skip) and float(skip) > 0
        part = f"{PARTIAL}: skips {float(skip):.0%} of its stages per token" if partial else ""
        out.append(" · ".join(m for m in (part, "" if trust.missing(marks) else str(marks)) if m))
    return out


#: the leaderboard's MFU column: the convention every view shows (`greenbench.vocabulary.flops`)
MFU_SHOWN = mfu_header(SHOWN, "%")


def _column(board: pd.DataFrame, name: str) -> pd.Series:
    """``board[name]`` as numbers, NaN where the board lacks it (rows older than it)."""
    if name not in board:
        return pd.Series(math.nan, index=board.index, dtype=float)
    return pd.to_numeric(board[name], errors="coerce")


def leaderboard_table(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard as shown: readable columns, numbers kept numeric for sorting; MFU under
    the convention every view shows (`MFU_SHOWN`), the other one beside it."""
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
            MFU_SHOWN: board[SHOWN.mfu_column] * 100.0,
            "mem MiB": board["peak_mem_bytes"] / 2**20,
            "CO2 g/M tok": board["co2_g_per_mtok"],
            "repeats": board["n_repeats"],
            "trust": trust_cells(board),
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
            mfu_header(CAUSAL, "%"): _column(board, CAUSAL.mfu_column) * 100.0,
            "MFU basis": board["peak_flops_source"].fillna("–"),
            "git sha": board["git_sha"].map(text_cell).str[:10],
            "run": board["latest_run_id"],
        }
    ).reset_index(drop=True)


#: the leaderboard columns shown, in order, so that the table fits a 1400 px window beside the
#: sidebar; the rest of `leaderboard_table` (workload, model, strategy, layout, precision, MFU
#: under the other convention, MFU basis, git sha, the tokens/s interval, the run) is in Run
#: detail and the sidebar's filters.
#: Each shown column's help text: `LEADERBOARD_HELP`
LEADERBOARD_SHOWN = (
    "configuration", "energy", "J/token", "J/token interval", "J/token net", "tokens/s",
    MFU_SHOWN, "mem MiB", "CO2 g/M tok", "repeats", "trust",
)  # fmt: skip
LEADERBOARD_HELP = {
    "configuration": "Model, sequence length, lengths, strategy × ranks",
    "energy": "Where the energy figure comes from: a counter (measured) or ≈ an estimate",
    "J/token": "Median gross joules per token over the repeats",
    "J/token interval": "95 % CI of the median from 6 repeats, else the min–max range",
    "J/token net": "Median joules per token above the idle baseline (– where unknown)",
    "tokens/s": "Median training throughput",
    MFU_SHOWN: (
        f"Model FLOPs utilisation: achieved FLOP/s over the peak (Run detail: its basis); FLOPs "
        f"counted under {SHOWN.label}'s convention, {SHOWN.doc}"
    ),
    "mem MiB": "Peak memory of the busiest rank, MiB",
    "CO2 g/M tok": "Grams of CO2 per million tokens at the region's carbon intensity",
    "repeats": "Repeats pooled",
    "trust": "What lowers trust: ⚠ contended, net energy unknown, too few repeats",
}


def style_marked(
    table: pd.DataFrame, measured: pd.Series, energy_columns: tuple[str, ...]
) -> Styler:
    """Format every number; mark the energy cells of estimated rows, and the ``trust`` cell of
    a contended row."""
    measured = measured.astype(bool).reset_index(drop=True)
    numeric = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
    styler = table.style.format(fmt, subset=numeric)
    text = [c for c in table.columns if c not in numeric]
    if text:  # a missing value reads "–", never "None" or "nan"
        styler = styler.format(text_cell, subset=text)
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
                lambda v: mark(text_cell(v), False), subset=pd.IndexSlice[estimated, text_cols]
            )
        styler = styler.map(lambda _: ESTIMATE_BG, subset=rows)
        if "energy" in table.columns:
            styler = styler.map(lambda _: ESTIMATE_BG, subset=pd.IndexSlice[estimated, ["energy"]])
    return styler
