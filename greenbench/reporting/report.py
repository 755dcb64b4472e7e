"""``greenbench report``: a Markdown report with PNG plots of the results in a database.

Writes ``README.md`` (so a forge renders it as the folder's page) and PNGs into one directory:
a leaderboard table, the Pareto plot of tokens/s against joules/token with its front, the
Transformer-vs-Mamba curves over sequence length, the FSDP-vs-ODC pairs, the hybrid layouts and
SkipPipe against a full pipeline and the GPU power-limit sweeps (time against energy per limit,
the knee, Zeus's choice) when those workloads are present, and one comparison chart per
workload. Each configuration is shown by the repeats of its newest commit. Simulated runs
(SkipPipe's simulator, energy "simulated (model)") and runs on emulated GPUs (energy "emulated
(GPU power model)") are in none of these: the SkipPipe and power-limit sections list them
apart, clearly labelled.

Every energy figure says where it came from: configurations measured by a counter and those
estimated are never pooled, the Pareto front is computed separately for each energy source, and
axes, bars and table cells carry "measured (source)" or "estimate". Every figure also says how far
to trust it (`greenbench.vocabulary.trust`): the leaderboard's ``trust`` column marks
configurations measured while the machine was shared (``⚠ contended``, also ringed on the Pareto
plot and listed), unknown net energy, and too few repeats for a 95 % interval; intervals and error
bars are named for what they are (a 95 % CI of the median from 6 repeats, else the min–max range
of the repeats). The numbers and the fronts
come from ``greenbench.reporting.leaderboard`` (the dashboard's pure core), so report and
dashboard agree.
Plots use matplotlib's Agg canvas directly (no pyplot state), so reports can be written from any
thread or process.

The folder is built under a temporary name beside the target and renamed into place when complete
(``greenbench.outputs``): a failure leaves no half-written report, and an existing non-empty folder
is replaced only with ``force``.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import greenbench
from greenbench.errors import StoreError
from greenbench.outputs import atomic_folder, resolve_target
from greenbench.reporting import hybrid, odc, power_limits, skippipe
from greenbench.reporting.leaderboard import leaderboard, pareto_front_by, without_simulated
from greenbench.reporting.refs import load_ref, query_results
from greenbench.vocabulary import energy_label
from greenbench.vocabulary.trust import CONTENDED, Trust, flagged, interval_caption

_DPI = 110


def write_report(
    db_path: str | Path,
    out_dir: Path,
    *,
    title: str = "greenbench report",
    ref: str | None = None,
    force: bool = False,
) -> Path:
    """Write the report for every configuration in ``db_path`` (or only those ``ref`` names).

    Returns the absolute path of the written ``README.md``; PNGs sit next to it and are linked
    relatively. An existing non-empty ``out_dir`` is an OutputError unless ``force``: then a
    folder holding only an earlier report (README.md and PNGs) is replaced whole, and in any
    other folder only the report's own files are replaced.
    """
    target = resolve_target(out_dir, kind="folder", force=force)
    raw = load_ref(db_path, ref) if ref else query_results(db_path)
    if raw.empty:
        raise StoreError(f"{db_path} holds no finished runs: run `greenbench run --suite smoke`")
    measured = without_simulated(raw)
    table = summarise(measured)
    with atomic_folder(target, swap=_only_report_files(target), last="README.md") as tmp:
        extra = (
            [
                *odc.section(db_path, tmp),
                *hybrid.section(db_path),
                *skippipe.section(db_path),
                *power_limits.section(db_path, tmp),
            ]
            if ref is None
            else []
        )
        _write_files(tmp, measured, table, title, extra)
    return target / "README.md"


def _only_report_files(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but what a report writes (README.md and PNGs)."""
    if not folder.is_dir():
        return False
    return all(
        p.is_file() and not p.is_symlink() and (p.name == "README.md" or p.suffix == ".png")
        for p in folder.iterdir()
    )


def _write_files(
    out_dir: Path, raw: pd.DataFrame, table: pd.DataFrame, title: str, extra: list[str]
) -> None:
    if table.empty:  # every finished run was simulated: only the sections that list them
        lines = [
            f"# {title}",
            "",
            "No measured configuration: every finished run is simulated or on emulated GPUs.",
        ]
        (out_dir / "README.md").write_text("\n".join([*lines, *extra]) + "\n", encoding="utf-8")
        return
    lines = [f"# {title}", "", *_provenance(raw, table), "", "## Leaderboard", ""]
    lines += _leaderboard(table)
    lines += _trust_notes(table)
    lines += ["", "## Speed against energy (Pareto front)", ""]
    lines += _pareto_section(table, out_dir)
    if "transformer-vs-mamba" in set(table["workload"]):
        lines += ["", "## Transformer vs Mamba over sequence length", ""]
        lines += _seq_len_section(table[table["workload"] == "transformer-vs-mamba"], out_dir)
    lines += extra
    for workload, group in table.groupby("workload", sort=True):
        lines += ["", f"## Workload `{workload}`", ""]
        lines += _workload_section(str(workload), group, out_dir)
    (out_dir / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """The dashboard's leaderboard (newest commit per configuration and energy source), with
    short column names for the plots and an ``energy`` label on every row."""
    board = leaderboard(rows, scope="latest")
    out = board.rename(
        columns={
            "joules_per_token": "jpt",
            "joules_per_token_ci_low": "jpt_lo",
            "joules_per_token_ci_high": "jpt_hi",
        }
    )
    out["energy"] = [
        energy_label(s, m)
        for s, m in zip(out["energy_source"], out["energy_measured"], strict=True)
    ]
    out["peak_mem_mib"] = out["peak_mem_bytes"].astype(float) / 2**20
    return out.sort_values(["workload", "energy", "jpt"], na_position="last").reset_index(drop=True)


def _provenance(raw: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    devices = ", ".join(sorted({str(d) for d in table["device_type"]}))
    hosts = ", ".join(sorted({str(h) for h in raw.get("host", pd.Series(dtype=str)).dropna()}))
    shas = ", ".join(sorted({str(s)[:10] for s in table["git_sha"].dropna()})) or "unknown"
    lines = [
        f"Generated {now} by greenbench {greenbench.__version__} from {len(raw['run_id'].unique())}"
        f" runs ({len(raw)} repeats); each configuration shows the repeats of its newest commit"
        f" ({shas}).",
        "",
        f"Devices: {devices}" + (f" on host(s) {hosts}" if hosts else "") + ".",
    ]
    measured = table["energy_measured"].astype(bool)
    if not measured.any():
        lines += [
            "",
            "> **Every energy figure in this report is an estimate** from a power model (no "
            "energy counter was read), not a measurement.",
        ]
    elif not measured.all():
        lines += [
            "",
            "> Some energy figures are measured and some estimated; they are labelled and never "
            "pooled or compared with each other.",
        ]
    peaks = sorted({str(p) for p in table["peak_flops_source"].dropna()}) or ["unknown"]
    cpu_only = table["device_type"].astype(str).str.startswith("cpu").all()
    lines += [
        "",
        ("> CPU-only results (no GPU). " if cpu_only else "> ")
        + f"MFU is relative to the peak FLOP/s from: {', '.join(peaks)}.",
    ]
    return lines


def _leaderboard(table: pd.DataFrame) -> list[str]:
    lines = [
        "| workload | configuration | layout | devices | energy | J/token (median [interval]) "
        "| tokens/s | MFU | peak mem (MiB) | repeats | trust |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    one_device_type = table["device_type"].nunique() == 1  # then the header names it
    for r in table.itertuples():
        device = f"×{r.devices}" if one_device_type else f"{r.device_type} ×{r.devices}"
        jpt = f"{_g(r.jpt)} [{_g(r.jpt_lo)}, {_g(r.jpt_hi)}]"
        mfu = "n/a" if math.isnan(r.mfu) else f"{r.mfu:.1%}"
        cells = [r.workload, r.config_name, r.layout, device, r.energy, jpt]
        cells += [_g(r.tokens_per_s), mfu]
        cells += [_g(r.peak_mem_mib), str(r.n_repeats), r.trust]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return lines


def _trust_notes(table: pd.DataFrame) -> list[str]:
    """Under the leaderboard: what its intervals are, and which configurations shared the
    machine or have no net energy (with why)."""
    lines = ["", f"Interval: {interval_caption(table['n_repeats'])}."]
    trusts = {r.config_name: Trust.of(r._asdict()) for r in table.itertuples(index=False)}
    busy = {name: t for name, t in trusts.items() if t.contended}
    if busy:
        lines += [
            "",
            f"> {CONTENDED}: {len(busy)} of {len(trusts)} configurations measured while the "
            "machine was shared; their figures may be skewed (rerun them on a quiet machine):",
        ]
        lines += [f"> - `{name}`: {t.contention.text}" for name, t in busy.items()]
    unknown = [name for name, t in trusts.items() if t.idle.state == "unreliable"]
    if unknown:
        names = ", ".join(f"`{n}`" for n in unknown)
        lines += [
            "",
            f"> Net energy unknown for {names}: their idle baseline was sampled while the machine "
            "was busy, or above the window's mean power (`greenbench show RUN_ID` says which).",
        ]
    return lines


def _pareto_section(table: pd.DataFrame, out_dir: Path) -> list[str]:
    usable = table.dropna(subset=["jpt", "tokens_per_s"])
    if usable.empty:
        return ["No configuration has both an energy and a throughput figure."]
    # one front per energy source: an estimate never knocks a measurement off the front
    fronts = pareto_front_by(usable, "tokens_per_s", "jpt", "max", "min", by="energy")
    groups = list(usable.groupby("energy", sort=True))
    fig = Figure(figsize=(6.0 * len(groups), 4.6))
    lines = []
    for i, (energy, g) in enumerate(groups):
        ax = fig.add_subplot(1, len(groups), i + 1)
        front = fronts[g.index]
        for j, (workload, w) in enumerate(g.groupby("workload", sort=True)):
            ax.scatter(
                w["tokens_per_s"],
                w["jpt"],
                label=str(workload),
                marker="os^Dv<>"[j % 7],
                facecolors="none" if energy == "estimate" else None,
                edgecolors=f"C{j}",
                color=f"C{j}",
            )
        f = g[front].sort_values("tokens_per_s")
        ax.step(f["tokens_per_s"], f["jpt"], where="post", color="k", ls="--", lw=1)
        ax.scatter(
            f["tokens_per_s"], f["jpt"], s=160, facecolors="none", edgecolors="k", label="front"
        )
        busy = g[g["contended"].map(flagged)]
        if len(busy):  # marked, never left out: the user judges them
            ax.scatter(busy["tokens_per_s"], busy["jpt"], s=260, marker="x", color="C3",
                       label=CONTENDED)  # fmt: skip
        _maybe_log(ax, g["tokens_per_s"], g["jpt"])
        ax.set_xlabel("tokens/s (higher is better)")
        ax.set_ylabel(f"J/token, {energy} (lower is better)")
        ax.set_title(f"energy: {energy}")
        ax.legend(fontsize=7)
        names = ", ".join(
            f"`{n}`" + (f" ({CONTENDED})" if flagged(c) else "")
            for n, c in zip(f["config_name"], f["contended"], strict=True)
        )
        lines.append(f"- Pareto front, energy {energy}: {names}")
    _save(fig, out_dir / "pareto.png")
    return ["![Pareto plot: tokens/s against J/token](pareto.png)", "", *lines]


def _seq_len_section(table: pd.DataFrame, out_dir: Path) -> list[str]:
    fig = Figure(figsize=(11.0, 4.4))
    ax_e, ax_t = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    keys = ["model_family", "model_size", "energy", "device_type", "devices"]
    for j, (key, g) in enumerate(table.groupby(keys, sort=True, dropna=False)):
        g = g.sort_values("seq_len")
        label = f"{key[0]}/{key[1]} ({key[2]})"
        style = {"color": f"C{j}", "marker": "o", "label": label}
        err = np.vstack([g["jpt"] - g["jpt_lo"], g["jpt_hi"] - g["jpt"]])
        ax_e.errorbar(g["seq_len"], g["jpt"], yerr=err, capsize=3, **style)
        ax_t.plot(g["seq_len"], g["tokens_per_s"], **style)
    energies = " / ".join(sorted(set(table["energy"])))
    ax_e.set_ylabel(f"J/token, {energies}")
    ax_t.set_ylabel("tokens/s")
    for ax in (ax_e, ax_t):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length (tokens)")
        ax.legend(fontsize=7)
    ax_e.set_title(f"energy per token: median, bars {_bars(table)}")
    ax_t.set_title("throughput (median)")
    _save(fig, out_dir / "transformer-vs-mamba-seq-len.png")
    return [
        "![J/token and tokens/s against sequence length](transformer-vs-mamba-seq-len.png)",
        "",
        f"Energy figures: {energies}. Error bars: {interval_caption(table['n_repeats'])}.",
    ]


def _workload_section(workload: str, g: pd.DataFrame, out_dir: Path) -> list[str]:
    order = [c for c in ("energy", "model_family", "strategy", "seq_len", "config_name") if c in g]
    g = g.sort_values(order).reset_index(drop=True)
    fig = Figure(figsize=(11.0, 1.2 + 0.45 * len(g)))
    ax_e, ax_t = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    pos = np.arange(len(g))
    labels = [
        f"{n} [{e}]" + (f" {CONTENDED}" if flagged(c) else "")
        for n, e, c in zip(g["config_name"], g["energy"], g["contended"], strict=True)
    ]
    hatch = ["//" if e == "estimate" else "" for e in g["energy"]]
    err = np.vstack([g["jpt"] - g["jpt_lo"], g["jpt_hi"] - g["jpt"]])
    bars = ax_e.barh(pos, g["jpt"].fillna(0), xerr=np.nan_to_num(err), capsize=3, color="C2")
    for bar, h in zip(bars, hatch, strict=True):
        bar.set_hatch(h)
    ax_t.barh(pos, g["tokens_per_s"], color="C0")
    ax_e.set_yticks(pos, labels, fontsize=8)
    ax_t.set_yticks(pos, [""] * len(g))
    ax_e.invert_yaxis()  # first configuration on top, reading order
    ax_t.invert_yaxis()
    ax_e.set_xlabel(f"J/token: median, bars {_bars(g)}; hatched = estimate")
    ax_t.set_xlabel("tokens/s (median)")
    fig.suptitle(workload)
    fig.subplots_adjust(left=0.38, wspace=0.08)
    name = f"workload-{_slug(workload)}.png"
    _save(fig, out_dir / name)
    best = g.dropna(subset=["jpt"]).groupby("energy")["jpt"].idxmin()
    lines = [f"![{workload}: J/token and tokens/s per configuration]({name})", ""]
    for energy, i in best.items():
        name, jpt = g.loc[i, "config_name"], _g(g.loc[i, "jpt"])
        busy = f", {CONTENDED}" if flagged(g.loc[i, "contended"]) else ""
        lines.append(f"- Fewest J/token, {energy}: `{name}` ({jpt}{busy})")
    if g["tokens_per_s"].notna().any():
        fastest = g.loc[g["tokens_per_s"].idxmax()]
        tps = _g(fastest["tokens_per_s"])
        busy = f", {CONTENDED}" if flagged(fastest["contended"]) else ""
        lines.append(f"- Fastest: `{fastest['config_name']}` ({tps} tokens/s{busy})")
    return lines + _waiting_table(g)


def _waiting_table(g: pd.DataFrame) -> list[str]:
    """How much of the ranks' time went to waiting for each other (multi-device rows only)."""
    multi = g[(g["devices"] > 1) & g["wait_fraction"].notna()]
    if multi.empty:
        return []
    interval = interval_caption(multi["n_repeats"])
    lines = [
        "",
        "Waiting for other ranks (share of rank-time; load imbalance shows here; interval: "
        f"{interval}):",
        "",
        "| configuration | wait fraction (median [interval]) |",
        "|---|---|",
    ]
    for r in multi.itertuples():
        ci = f"[{r.wait_fraction_ci_low:.3f}, {r.wait_fraction_ci_high:.3f}]"
        lines.append(f"| {r.config_name} | {r.wait_fraction:.3f} {ci} |")
    return lines


def _bars(rows: pd.DataFrame) -> str:
    """What error bars over ``rows`` show, short enough for an axis (`interval_caption`)."""
    caption = interval_caption(rows["n_repeats"])
    return caption.replace(" of the repeats, not a CI (a CI needs ≥ 6 repeats)", ", not a CI")


def _maybe_log(ax, xs: pd.Series, ys: pd.Series) -> None:  # type: ignore[no-untyped-def]
    for values, setter in ((xs, ax.set_xscale), (ys, ax.set_yscale)):
        v = values[values > 0]
        if len(v) and v.max() / v.min() > 20:
            setter("log")


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=_DPI, bbox_inches="tight", metadata={"Software": None})


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "workload"


def _g(v: float) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"
