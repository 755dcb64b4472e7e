"""The hybrid layouts side by side, beside the published study's qualitative findings.

One table per model family: each layout of the `hybrid` workload (the newest ok run of each
configuration, medians over its repeats) with tokens/s, MFU, the model state of the busiest rank
(parameters, gradients, optimizer state and activations, counted from tensors), J/token, the
energy spent waiting, and the bytes each rank moved per step on each mesh dimension. Beside it,
the study's findings (arXiv 2602.09109: for LLaMA, DP gives the highest MFU, TP the lowest
memory, PP a balance; for Mamba, TP scales memory best and CP gives the lowest MFU and the highest
memory), each with what these runs show, and why a CPU differs where it does.
Used by ``greenbench report``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from greenbench.reporting.repeats import newest_runs, read_repeats
from greenbench.reporting.section import ReportContext
from greenbench.store import read_frame
from greenbench.store.views import TABLE_NAMES
from greenbench.vocabulary import Layout
from greenbench.vocabulary.flops import SHOWN, mfu_header

WORKLOAD = "hybrid"
MEDIANS = ["tokens_per_s", SHOWN.mfu_column, "joules_per_token", "wait_energy_j", "wait_fraction"]
COLUMNS = [
    "run_id", "config_key", "workload", "strategy", "started_at", "energy_source",
    "energy_measured", "model_family", "model_size", "layout", "state_bytes",
    "rank_cpu_quota", "device_type", *MEDIANS,
]  # fmt: skip
#: the study's qualitative findings, per family: (what, layout kind, measure, highest or lowest)
FINDINGS = {
    "transformer": [
        ("DP gives the highest MFU", "dp", "tokens_per_s", "max"),
        ("TP gives the lowest memory", "tp", "state_bytes", "min"),
        ("PP balances MFU and memory", "pp", None, None),
    ],
    "mamba": [
        ("TP scales memory best (the lowest memory)", "tp", "state_bytes", "min"),
        ("CP gives the lowest MFU", "cp", "tokens_per_s", "min"),
        ("CP gives the highest memory", "cp", "state_bytes", "max"),
    ],
}


def kind(layout: str) -> str:
    """``dp`` (data parallel only), ``tp``/``pp``/``cp`` (that degree alone beside dp) or
    ``mixed``."""
    parsed = Layout.parse(layout)
    model = [d for d in ("tp", "pp", "cp") if getattr(parsed, d) > 1]
    if not model:
        return "dp"
    return model[0] if len(model) == 1 else "mixed"


def read_layouts(db_path: str | Path) -> pd.DataFrame:
    """One row per (family, size, layout) of the workload in ``db_path`` (empty when none)."""
    rows = read_repeats(db_path, COLUMNS)
    rows = rows[rows["workload"] == WORKLOAD]
    if rows.empty:
        return pd.DataFrame()
    rows = newest_runs(rows)
    out = (
        rows.groupby(["model_family", "model_size", "layout", "strategy"], dropna=False)
        .agg(
            **{m: (m, "median") for m in MEDIANS},
            state_bytes=("state_bytes", "max"),
            energy=("energy", lambda e: " / ".join(sorted(set(e)))),
            run_id=("run_id", "last"),
            repeats=("run_id", "size"),
        )
        .reset_index()
    )
    out["kind"] = out["layout"].map(kind)
    comm = _bytes_per_step(db_path, list(out["run_id"]))
    out = out.merge(comm, on="run_id", how="left")
    return out.sort_values(["model_family", "tokens_per_s"], ascending=[True, False])


def _bytes_per_step(db_path: str | Path, run_ids: list[str]) -> pd.DataFrame:
    """Per run: ``dim: MiB`` moved per rank and step on each mesh dimension, as one text."""
    tables = set(read_frame(db_path, TABLE_NAMES)["table_name"])
    if not run_ids or "comm_records" not in tables:  # a database from before the records
        return pd.DataFrame(columns=["run_id", "traffic"])
    quoted = ", ".join("'" + r.replace("'", "") + "'" for r in run_ids)
    frame = read_frame(
        db_path,
        "SELECT c.run_id, c.dim, sum(c.bytes) / count(DISTINCT c.rank) / count(DISTINCT c.repeat)"
        " AS bytes, any_value(json_array_length(x.step_times_s)) AS steps FROM comm_records c"
        " JOIN results x ON x.run_id = c.run_id AND x.repeat = c.repeat"
        f" WHERE c.run_id IN ({quoted}) GROUP BY c.run_id, c.dim",
    )
    if frame.empty:
        return pd.DataFrame(columns=["run_id", "traffic"])
    frame["mib"] = frame["bytes"] / frame["steps"] / 2**20
    frame = frame[frame["bytes"] > 0]  # barriers move nothing
    text = (
        frame.sort_values("dim")
        .groupby("run_id")
        .apply(
            lambda g: ", ".join(f"{d} {m:,.1f}" for d, m in zip(g["dim"], g["mib"], strict=True)),
            include_groups=False,
        )
    )
    return text.rename("traffic").reset_index()


def markdown(table: pd.DataFrame) -> list[str]:
    """Per family: the layouts' table, then the findings beside what the runs show."""
    lines: list[str] = []
    for family, rows in table.groupby("model_family", sort=True):
        lines += [
            "",
            f"### {family}",
            "",
            f"| layout | strategy | tokens/s | {mfu_header(SHOWN)} | model state, busiest rank "
            "(MiB) | J/token "
            "| wait energy (J) | wait fraction | MiB per rank and step, by mesh dim |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows.itertuples():
            value = getattr(r, SHOWN.mfu_column)
            mfu = "n/a" if pd.isna(value) else f"{value:.1%}"
            state = "n/a" if pd.isna(r.state_bytes) else f"{r.state_bytes / 2**20:,.1f}"
            lines.append(
                f"| {Layout.parse(r.layout).short} | {r.strategy} | {r.tokens_per_s:,.0f} "
                f"| {mfu} | {state} | {r.joules_per_token:.3g} ({r.energy}) "
                f"| {r.wait_energy_j:.3g} | {r.wait_fraction:.3f} | {r.traffic or '—'} |"
            )
        lines += ["", *findings(str(family), rows)]
    return lines


def findings(family: str, rows: pd.DataFrame) -> list[str]:
    """The study's findings for ``family`` and whether these runs agree, one bullet each."""
    out = []
    for claim, want, measure, how in FINDINGS.get(family, []):
        if measure is None:
            out.append(f"- study: {claim} — here: {_balance(rows)}")
            continue
        known = rows.dropna(subset=[measure])
        if known.empty or want not in set(known["kind"]):
            out.append(f"- study: {claim} — here: no {want} layout measured")
            continue
        pick = known.loc[known[measure].idxmax() if how == "max" else known[measure].idxmin()]
        verdict = "agrees" if pick["kind"] == want else "differs"
        what = "tokens/s" if measure == "tokens_per_s" else "model state"
        word = "highest" if how == "max" else "lowest"
        out.append(
            f"- study: {claim} — here: {verdict}; the {word} {what} is "
            f"{Layout.parse(pick['layout']).short}"
        )
    return out


def _balance(rows: pd.DataFrame) -> str:
    """Where the pipeline layouts rank among the layouts by tokens/s and by model state."""
    pipes = rows[rows["layout"].map(lambda t: Layout.parse(t).pp > 1)]
    if pipes.empty or rows["state_bytes"].isna().all():
        return "no pipeline layout measured"
    speed = rows["tokens_per_s"].rank(ascending=False)
    memory = rows["state_bytes"].rank()
    parts = [
        f"{Layout.parse(r.layout).short} is #{int(speed[i])} of {len(rows)} by tokens/s and "
        f"#{int(memory[i])} by memory (1 = least)"
        for i, r in pipes.iterrows()
    ]
    return "; ".join(parts)


def section(db_path: str | Path) -> list[str]:
    """The report's hybrid-layouts section (empty when the database holds no such run)."""
    table = read_layouts(db_path)
    if table.empty:
        return []
    return [
        "",
        "## Hybrid layouts (DP × TP × PP × CP)",
        "",
        "Each layout trains the same model on the same minibatches. Model state is the most any "
        "rank held: parameters, gradients and optimizer state as local shards, plus the peak of "
        "activations saved for backward, counted from tensors (not the process's memory). "
        "Waiting includes pipeline bubbles (a stage receiving what its neighbour has not sent "
        "yet). MFU on a CPU is against this machine's measured GEMM peak, not a GPU's.",
        *markdown(table),
        "",
        "Where a CPU differs from the study's GPUs, and why: (1) model state here is mostly "
        "activations (tiny presets, 512-token rows: parameters and AdamW state are a few MiB), "
        "so the layouts that split the sequence (CP) or the layers (PP) hold least, while TP "
        "splits only the projections' activations (the norms, the residual stream and the "
        "logits stay whole on every tp rank); on the study's 1B-and-up models parameters and "
        "optimizer state dominate, and TP, which splits them, holds least. (2) Collectives run "
        "through gloo over loopback TCP and never overlap compute, so every tensor-parallel "
        "all-reduce stops a half-core rank: TP and CP lose more throughput than over NVLink. "
        "(3) Context parallelism is greenbench's own CPU ring (attention unfused, in float32) "
        "and, for Mamba, a chunked scan corrected by the state passed along the ranks, so a "
        "token costs more compute than on one rank's kernels.",
    ]


class HybridSection:
    """`ReportSection`: `section` over the whole database (a REF narrows the report to runs
    that are not this section's)."""

    name = "hybrid-layouts"
    order = 50
    doc = "the hybrid layouts (DP × TP × PP × CP) side by side, beside the study's findings"

    def applies(self, context: ReportContext) -> bool:
        """When the report reads the whole database."""
        return context.whole_database

    def render(self, context: ReportContext) -> list[str]:
        """The layouts' tables and findings (none when the database holds no such run)."""
        return section(context.db_path)
