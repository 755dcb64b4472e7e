"""FSDP against ODC, side by side: the `fsdp-vs-odc` workload's pairs and their ratios.

Rows pair the two strategies on the same model, lengths, rank count and CPU-quota setting (the
newest ok run of each configuration, medians over its repeats). ``speedup`` is ODC's tokens/s over
FSDP's; ``energy_ratio`` is ODC's J/token over FSDP's (below 1: ODC spends less per token). Energy
figures carry their label: a pair whose two sides were not metered the same way shows no ratio.
Used by ``greenbench report`` and ``benchmarks/odc.py``.

The pairs are stock FSDP2 against ODC. The two variants between them (FSDP2 on ODC's shared
memory, ``fsdp.transport``; ODC in lockstep, ``odc.meet``) are told apart by `variant_of` and left
out of the pairs; `read_variants` gives every variant's medians, from which the benchmark
decomposes ODC ÷ FSDP into transport, engine and balancing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from greenbench.reporting.repeats import newest_runs, read_repeats
from greenbench.reporting.section import ReportContext
from greenbench.settings import SCHEMA
from greenbench.strategies.fsdp_settings import FSDPSettings
from greenbench.strategies.odc.settings import ODCSettings

WORKLOAD = "fsdp-vs-odc"
PAIR = ["model_family", "model_size", "seq_len", "lengths", "nproc", "rank_cpu_quota"]
MEDIANS = ["tokens_per_s", "wait_fraction", "joules_per_token", "wait_energy_j"]
COLUMNS = [
    "run_id", "config_key", "workload", "strategy", "started_at", "energy_source",
    "energy_measured", "peak_mem_bytes", "config", *PAIR, *MEDIANS,
]  # fmt: skip
#: the decomposition's four variants, in order: (a) stock FSDP2, (b) FSDP2's engine on ODC's
#: transport, (c) ODC's engine in lockstep on the same-count split, (d) ODC
VARIANTS = {
    "fsdp": "FSDP2 (gloo)",
    "fsdp-shm": "FSDP2 on ODC's shared memory",
    "odc-lockstep": "ODC, lockstep",
    "odc": "ODC",
}
LENGTH_ORDER = {"fixed": 0, "uniform": 1, "swe-smith": 2, "longalign": 3}


def variant_of(strategy: str, config: object) -> str:
    """A run's variant (a `VARIANTS` name) from its strategy and stored configuration (the
    RunSpec's JSON; a configuration stored before the variants existed is stock)."""
    try:
        settings = (json.loads(config) if isinstance(config, str) else config)["settings"]
        typed = SCHEMA.config(settings)
    except (TypeError, ValueError, KeyError):
        return strategy
    if strategy == "fsdp":
        own = typed[FSDPSettings]
        return "fsdp-shm" if own is not None and own.transport != "gloo" else "fsdp"
    if strategy == "odc":
        meet = typed[ODCSettings]
        return "odc-lockstep" if meet is not None and meet.meet == "microbatch" else "odc"
    return strategy


def _workload_rows(db_path: str | Path) -> pd.DataFrame:
    rows = read_repeats(db_path, COLUMNS)
    rows = rows[rows["workload"] == WORKLOAD].copy()
    rows["variant"] = [
        variant_of(s, c) for s, c in zip(rows["strategy"], rows["config"], strict=True)
    ]
    return rows


def read_pairs(db_path: str | Path) -> pd.DataFrame:
    """The workload's FSDP/ODC pairs in ``db_path`` (empty when it holds none): stock FSDP2
    against ODC, the variants between them left out. A database from before CPU quotas were
    recorded reads as quota unknown."""
    return _stock_pairs(_workload_rows(db_path))


def _stock_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    return odc_pairs(rows[rows["variant"].isin(["fsdp", "odc"])])


def read_variants(db_path: str | Path) -> pd.DataFrame:
    """Per setup and variant (`VARIANTS`), the medians over the newest run's repeats: one row
    per (`PAIR`…, ``variant``), with ``repeats`` and the energy label."""
    return _variants(_workload_rows(db_path))


def _variants(rows: pd.DataFrame) -> pd.DataFrame:
    if rows.empty:
        return pd.DataFrame()
    rows = newest_runs(rows)
    out = (
        rows.groupby([*PAIR, "variant"], dropna=False)
        .agg(
            **{m: (m, "median") for m in MEDIANS},
            energy=("energy", lambda e: " / ".join(sorted(set(e)))),
            repeats=("run_id", "size"),
            run_id=("run_id", "last"),
        )
        .reset_index()
    )
    order = list(VARIANTS)
    out["_l"] = out["lengths"].map(LENGTH_ORDER).fillna(len(LENGTH_ORDER))
    out["_v"] = out["variant"].map(lambda v: order.index(v) if v in order else len(order))
    return out.sort_values(["nproc", "rank_cpu_quota", "_l", "_v"]).drop(columns=["_l", "_v"])


def odc_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per pair from repeat rows (see the module docstring)."""
    if rows.empty:
        return pd.DataFrame()
    rows = newest_runs(rows)
    agg = rows.groupby([*PAIR, "strategy"], dropna=False).agg(
        **{m: (m, "median") for m in MEDIANS},
        peak_mem_bytes=("peak_mem_bytes", "max"),
        energy=("energy", lambda e: " / ".join(sorted(set(e)))),
        repeats=("run_id", "size"),
    )
    wide = agg.unstack("strategy")
    if "fsdp" not in wide.columns.get_level_values(1) or "odc" not in wide.columns.get_level_values(
        1
    ):
        return pd.DataFrame()
    out = pd.DataFrame(index=wide.index)
    for column in [*MEDIANS, "peak_mem_bytes", "energy", "repeats"]:
        for side in ("fsdp", "odc"):
            out[f"{side}_{column}"] = wide[(column, side)]
    out = out.dropna(subset=["fsdp_tokens_per_s", "odc_tokens_per_s"]).reset_index()
    out["speedup"] = out["odc_tokens_per_s"] / out["fsdp_tokens_per_s"]
    same_meter = out["fsdp_energy"] == out["odc_energy"]
    out["energy_ratio"] = (out["odc_joules_per_token"] / out["fsdp_joules_per_token"]).where(
        same_meter
    )
    order = out["lengths"].map(LENGTH_ORDER).fillna(len(LENGTH_ORDER))
    return out.assign(_o=order).sort_values(["nproc", "rank_cpu_quota", "_o"]).drop(columns="_o")


def setup_label(nproc: int, quota: object) -> str:
    """``4 ranks, CPU quota`` / ``4 ranks, shared cores`` / ``2 ranks``."""
    if quota is True:
        return f"{nproc} ranks, CPU quota"
    return f"{nproc} ranks" + (", shared cores" if nproc > 2 else "")


def markdown(pairs: pd.DataFrame) -> list[str]:
    """The table, one line per pair."""
    lines = [
        "| ranks | lengths | FSDP tokens/s | ODC tokens/s | ODC ÷ FSDP | wait fraction FSDP → "
        "ODC | J/token FSDP → ODC | wait energy (J) FSDP → ODC | peak mem MiB FSDP → ODC |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in pairs.itertuples():
        ratio = "n/a (meters differ)" if pd.isna(r.energy_ratio) else f"×{r.energy_ratio:.2f}"
        lines.append(
            f"| {setup_label(r.nproc, r.rank_cpu_quota)} | {r.lengths} "
            f"| {r.fsdp_tokens_per_s:,.0f} | {r.odc_tokens_per_s:,.0f} | **{r.speedup:.2f}** "
            f"| {r.fsdp_wait_fraction:.3f} → {r.odc_wait_fraction:.3f} "
            f"| {r.fsdp_joules_per_token:.3g} → {r.odc_joules_per_token:.3g} ({ratio}; "
            f"{r.odc_energy}) "
            f"| {r.fsdp_wait_energy_j:.3g} → {r.odc_wait_energy_j:.3g} "
            f"| {r.fsdp_peak_mem_bytes / 2**20:,.0f} → {r.odc_peak_mem_bytes / 2**20:,.0f} |"
        )
    return lines


def plot(pairs: pd.DataFrame, path: Path) -> None:
    """ODC ÷ FSDP tokens/s (bars) and both wait fractions (lines) per lengths, one panel per
    setup, on shared axes so the panels compare at a glance."""
    setups = list(pairs.groupby(["nproc", "rank_cpu_quota"], dropna=False, sort=True))
    fig = Figure(figsize=(4.6 * len(setups), 4.4))
    top_ratio = max(1.3, float(pairs["speedup"].max()) * 1.1)
    top_wait = max(0.05, float(pairs[["fsdp_wait_fraction", "odc_wait_fraction"]].max().max()))
    for i, ((nproc, quota), g) in enumerate(setups):
        ax = fig.add_subplot(1, len(setups), i + 1)
        x = list(range(len(g)))
        ax.bar(x, g["speedup"], width=0.5, color="C0", alpha=0.8, label="tokens/s, ODC ÷ FSDP")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylim(0, top_ratio)
        ax.set_xlim(-0.6, len(g) - 0.4)
        twin = ax.twinx()
        twin.plot(x, g["fsdp_wait_fraction"], "o--", color="C3", label="FSDP wait fraction")
        twin.plot(x, g["odc_wait_fraction"], "s--", color="C2", label="ODC wait fraction")
        twin.set_ylim(0, top_wait * 1.3)
        ax.set_xticks(x, list(g["lengths"]))
        ax.set_title(setup_label(int(nproc), quota))
        if i == 0:
            ax.set_ylabel("tokens/s, ODC ÷ FSDP (bars)")
        if i == len(setups) - 1:
            twin.set_ylabel("wait fraction (lines)")
        else:
            twin.set_yticklabels([])
    bars, lines = ax.get_legend_handles_labels(), twin.get_legend_handles_labels()
    fig.legend(bars[0] + lines[0], bars[1] + lines[1], loc="lower center", ncol=3, fontsize=8)
    fig.subplots_adjust(bottom=0.2, wspace=0.15)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})


def section(db_path: str | Path, out_dir: Path) -> list[str]:
    """The report's FSDP-vs-ODC section (empty when the database holds no pair)."""
    rows = _workload_rows(db_path)  # read once: the pairs and the variants both come from it
    pairs = _stock_pairs(rows)
    if pairs.empty:
        return []
    plot(pairs, out_dir / "fsdp-vs-odc.png")
    return [
        "",
        "## FSDP vs ODC (on-demand communication)",
        "",
        "Each pair trains the same model on the same minibatches: FSDP2 with equal microbatch "
        "counts per rank (its ranks meet in each microbatch's all-gathers and reduce-scatters), "
        "ODC with each rank's share balanced by cost (meeting once per minibatch). ODC ÷ FSDP "
        "above 1 means ODC trains faster. On one host that ratio also holds the transport "
        "(ODC copies through shared memory, FSDP2's collectives go through gloo over "
        "loopback), which is not ODC's mechanism: where the variants between them are stored, "
        "the decomposition below separates it.",
        "",
        "![ODC ÷ FSDP tokens/s and wait fractions per length distribution](fsdp-vs-odc.png)",
        "",
        *markdown(pairs),
        *decomposition(_variants(rows)),
    ]


def decomposition(variants: pd.DataFrame) -> list[str]:
    """ODC ÷ FSDP2 as transport (b/a) × engine (c/b) × decoupled balancing (d/c), per setup and
    lengths where all four `VARIANTS` are stored (none: no lines)."""
    if variants.empty:
        return []
    lines = []
    for keys, g in variants.groupby(PAIR, dropna=False, sort=False):
        tps = dict(zip(g["variant"], g["tokens_per_s"], strict=True))
        if not all(v in tps for v in VARIANTS):
            continue
        a, b, c, d = (tps[v] for v in VARIANTS)
        setup = dict(zip(PAIR, keys, strict=True))
        lines.append(
            f"| {setup_label(setup['nproc'], setup['rank_cpu_quota'])} | {setup['lengths']} "
            f"| {a:,.0f} | {b:,.0f} | {c:,.0f} | {d:,.0f} | {b / a:.2f} | {c / b:.2f} "
            f"| **{d / c:.2f}** | {d / a:.2f} |"
        )
    if not lines:
        return []
    return [
        "",
        "### Where ODC's lead comes from",
        "",
        "Tokens/s of (a) FSDP2, (b) FSDP2 whose all-gathers and reduce-scatters move their bytes "
        "through ODC's shared memory but still meet like collectives, (c) ODC in lockstep (the "
        "same-count split, meeting every microbatch) and (d) ODC. Transport = b/a is not ODC's "
        "mechanism; engine = c/b (on-demand gets and pushes against per-layer collectives, both "
        "in lockstep) and decoupled balancing = d/c are. Their product is d/a. "
        "`python benchmarks/odc.py` prints each beside its compute-only bound.",
        "",
        "| ranks | lengths | (a) FSDP2 | (b) on shared memory | (c) ODC lockstep | (d) ODC "
        "| transport b/a | engine c/b | balancing d/c | d/a |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *lines,
    ]


class OdcSection:
    """`ReportSection`: `section` over the whole database (a REF narrows the report to runs
    that are not this section's)."""

    name = "fsdp-vs-odc"
    order = 40
    doc = "FSDP against ODC: the `fsdp-vs-odc` pairs, their speed-ups and energy ratios"

    def applies(self, context: ReportContext) -> bool:
        """When the report reads the whole database."""
        return context.whole_database

    def render(self, context: ReportContext) -> list[str]:
        """The pairs' table and plot (none when the database holds no such run)."""
        return section(context.db_path, context.out_dir)
