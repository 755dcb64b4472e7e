"""``greenbench report``: a Markdown report with PNG plots of the results in a database.

Writes ``README.md`` (so a forge renders it as the folder's page) and PNGs into one directory:
a leaderboard table, Pareto plots of tokens/s against joules/token (one per workload and kind of
energy figure, each with its front, front points labelled), the Transformer-vs-Mamba curves
over sequence length, the FSDP-vs-ODC pairs, the hybrid layouts and SkipPipe against a full
pipeline and the GPU power-limit sweeps (time against energy per limit, the knee, Zeus's choice)
when those workloads are present, one comparison chart per workload, and a table of the user's
own measurements. Each configuration is shown by the repeats of its newest commit.

Only what is comparable is ranked together (`greenbench.reporting.leaderboard`). Simulated runs
(SkipPipe's simulator, energy "simulated (model)") and runs on emulated GPUs (energy "emulated
(GPU power model)") are on no leaderboard or front: the SkipPipe and power-limit sections list
them apart, clearly labelled. ``greenbench measure`` results (an own loop, a whole process) are
not training windows: they get a table of their own. A SkipPipe run that skips stages trains
part of the model per token: it is marked "partial model", listed after the full-model rows of
its workload, on no front and never the fewest J/token. A database with no measured training
run still gets a report: a note that there is no measured leaderboard, what the database holds,
and the sections that show it.

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
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

import greenbench
from greenbench.errors import StoreError
from greenbench.outputs import atomic_folder, resolve_target
from greenbench.reporting import hybrid, odc, power_limits, skippipe
from greenbench.reporting.leaderboard import (
    comparable_front,
    leaderboard,
    own_measurement_mask,
    own_measurements,
    simulated_mask,
    training_rows,
)
from greenbench.reporting.refs import load_ref, query_results
from greenbench.vocabulary import EMULATED_SOURCE, OWN_MEASUREMENT_KINDS, energy_label
from greenbench.vocabulary.trust import CONTENDED, Trust, flagged, interval_caption

_DPI = 110
#: how a configuration that trains only part of the model per token is marked
PARTIAL = "partial model"
#: a short point or bar label's most characters
_LABEL_CHARS = 42


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
    measured = training_rows(raw)
    table = summarise(measured)
    own = own_measurements(raw)
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
        extra += _own_section(own)
        if table.empty:
            _write_without_leaderboard(tmp, raw, title, extra)
        else:
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


def _write_without_leaderboard(
    out_dir: Path, raw: pd.DataFrame, title: str, extra: list[str]
) -> None:
    """The report of a database with no measured training run: what it holds, a note that there
    is no measured leaderboard (nor Pareto front), and the sections that show those runs."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    runs = raw.drop_duplicates("run_id")
    sim = simulated_mask(runs)
    emulated = sim & runs["energy_source"].astype(str).str.contains(EMULATED_SOURCE, regex=False)
    own = own_measurement_mask(runs) & ~sim
    kinds = [
        f"{n} {what}"
        for n, what in (
            (int((sim & ~emulated).sum()), "simulated (SkipPipe's simulator, modelled energy)"),
            (int(emulated.sum()), "on emulated GPUs (a GPU power model's energy)"),
            (int(own.sum()), "own measurements (`greenbench measure`)"),
        )
        if n
    ]
    lines = [
        f"# {title}",
        "",
        f"Generated {now} by greenbench {greenbench.__version__} from {len(runs)} runs "
        f"({len(raw)} repeats): {', '.join(kinds)}.",
        "",
        "> **No measured leaderboard.** This database holds no measured training run, so there is "
        "no leaderboard, Pareto front or per-workload ranking. The sections below show what it "
        "holds: simulated and emulated figures come from a model, not a measurement, and are "
        "labelled so; they are never ranked as measurements. Measure a workload "
        "(`greenbench run`) to get a leaderboard.",
    ]
    (out_dir / "README.md").write_text("\n".join([*lines, *extra]) + "\n", encoding="utf-8")


def _write_files(
    out_dir: Path, raw: pd.DataFrame, table: pd.DataFrame, title: str, extra: list[str]
) -> None:
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
    order = ["workload", "energy", "partial_model", "jpt"]
    return out.sort_values(order, na_position="last").reset_index(drop=True)


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
        name = (
            f"{r.config_name} ({_partial(r.skipped_fraction)})"
            if r.partial_model
            else r.config_name
        )
        cells = [r.workload, name, r.layout, device, r.energy, jpt]
        cells += [_g(r.tokens_per_s), mfu]
        cells += [_g(r.peak_mem_mib), str(r.n_repeats), r.trust]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return lines


def _trust_notes(table: pd.DataFrame) -> list[str]:
    """Under the leaderboard: what its intervals are, and which configurations shared the
    machine or have no net energy (with why)."""
    lines = ["", f"Interval: {interval_caption(table['n_repeats'])}."]
    lines += [
        "",
        "Rows are ranked within each workload and kind of energy figure only: a workload's tokens "
        "are not another's.",
    ]
    if table["partial_model"].astype(bool).any():
        lines += [
            "",
            f"> {PARTIAL}: these configurations train only part of the model per token (SkipPipe "
            "skipping the stated share of its stages), so their J/token pays for less work than a "
            "full-model run's. They are listed after the full-model rows of their workload, never "
            "on a Pareto front and never the fewest J/token; compare them with their full "
            "pipeline in the SkipPipe section, with the loss beside each.",
        ]
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
    # one front per workload and energy source: an estimate never knocks a measurement off a
    # front, one workload's tokens are not another's, and a partial-model run is on none
    fronts = comparable_front(
        usable, "tokens_per_s", "jpt", "max", "min", by=("workload", "energy")
    )
    groups = list(usable.groupby(["workload", "energy"], sort=True))
    cols = min(len(groups), 3)
    rows = math.ceil(len(groups) / cols)
    fig = Figure(figsize=(5.6 * cols, 4.6 * rows), layout="constrained")
    lines = []
    for i, ((workload, energy), g) in enumerate(groups):
        ax = fig.add_subplot(rows, cols, i + 1)
        front = fronts[g.index]
        partial = g["partial_model"].astype(bool)
        whole = g[~partial]
        ax.scatter(
            whole["tokens_per_s"], whole["jpt"], marker="o", color="C0",
            facecolors="none" if energy == "estimate" else None, label="configuration",
        )  # fmt: skip
        if partial.any():
            ax.scatter(g[partial]["tokens_per_s"], g[partial]["jpt"], marker="s", color="C7",
                       label=f"{PARTIAL} (off the front)")  # fmt: skip
        f = g[front].sort_values("tokens_per_s")
        ax.step(f["tokens_per_s"], f["jpt"], where="post", color="k", ls="--", lw=1)
        ax.scatter(
            f["tokens_per_s"], f["jpt"], s=160, facecolors="none", edgecolors="k", label="front"
        )
        shorts = dict(zip(g.index, short_labels(list(g["config_name"]))[0], strict=True))
        middle = (g["tokens_per_s"].min() + g["tokens_per_s"].max()) / 2
        for k, r in f.iterrows():  # each front point named, short, towards the plot's inside
            right = r["tokens_per_s"] > middle
            ax.annotate(shorts[k], (r["tokens_per_s"], r["jpt"]), textcoords="offset points",
                        xytext=(-6 if right else 6, 6), ha="right" if right else "left",
                        fontsize=7)  # fmt: skip
        busy = g[g["contended"].map(flagged)]
        if len(busy):  # marked, never left out: the user judges them
            ax.scatter(busy["tokens_per_s"], busy["jpt"], s=260, marker="x", color="C3",
                       label=CONTENDED)  # fmt: skip
        _maybe_log(ax, g["tokens_per_s"], g["jpt"])
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.set_xlabel("tokens/s (higher is better)")
        ax.set_ylabel(f"J/token, {energy} (lower is better)")
        ax.set_title(_wrap(f"{workload}, energy: {energy}", 48), fontsize=9)
        ax.legend(fontsize=7)
        names = ", ".join(
            f"`{n}`" + (f" ({CONTENDED})" if flagged(c) else "")
            for n, c in zip(f["config_name"], f["contended"], strict=True)
        )
        lines.append(f"- Pareto front, `{workload}`, energy {energy}: {names}")
        if partial.any():
            off = ", ".join(f"`{n}`" for n in g[partial]["config_name"])
            lines.append(f"  - off the front ({PARTIAL}, not comparable on J/token): {off}")
    _save(fig, out_dir / "pareto.png")
    return [
        "![Pareto plots: tokens/s against J/token, one per workload and energy](pareto.png)",
        "",
        "One front per workload and kind of energy figure (a workload's tokens are not "
        f"another's); a {PARTIAL} run (SkipPipe skipping stages) is drawn but on no front.",
        "",
        *lines,
    ]


def short_labels(names: list[str], most: int = _LABEL_CHARS) -> tuple[list[str], str]:
    """``names`` less the words all of them share, each at most ``most`` characters (a cut
    name ends in "…"), and the shared words (what a title can say once)."""
    words = [str(n).split() for n in names]
    shared = set.intersection(*(set(w) for w in words)) if len(words) > 1 else set()
    common = " ".join(w for w in words[0] if w in shared) if words else ""
    out = []
    for name, ws in zip(names, words, strict=True):
        short = " ".join(w for w in ws if w not in shared) or str(name)
        out.append(short if len(short) <= most else short[: most - 1] + "…")
    return out, common


def _wrap(text: str, width: int) -> str:
    """``text`` broken into lines of at most ``width`` characters (never cut)."""
    return "\n".join(textwrap.wrap(text, width, break_long_words=True)) or text


def _partial(skipped: float) -> str:
    """The marker of a configuration that skips ``skipped`` of its stages per token."""
    return f"{PARTIAL}: skips {skipped:.0%} of its stages per token"


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
    partial = g["partial_model"].astype(bool)
    shorts, common = short_labels(list(g["config_name"]))
    labels = [
        f"{n} [{e}]" + (" [partial]" if p else "") + (f" {CONTENDED}" if flagged(c) else "")
        for n, e, p, c in zip(shorts, g["energy"], partial, g["contended"], strict=True)
    ]
    fig = Figure(figsize=(11.0, 1.6 + 0.45 * len(g)), layout="constrained")
    ax_e, ax_t = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    pos = np.arange(len(g))
    hatch = ["//" if e == "estimate" else "" for e in g["energy"]]
    err = np.vstack([g["jpt"] - g["jpt_lo"], g["jpt_hi"] - g["jpt"]])
    bars = ax_e.barh(pos, g["jpt"].fillna(0), xerr=np.nan_to_num(err), capsize=3, color="C2")
    for bar, h in zip(bars, hatch, strict=True):
        bar.set_hatch(h)
    ax_t.barh(pos, g["tokens_per_s"], color="C0")
    ax_e.set_yticks(pos, labels, fontsize=8)
    ax_t.set_yticks(pos, [""] * len(g))
    for ax in (ax_e, ax_t):
        ax.invert_yaxis()  # first configuration on top, reading order
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))  # ticks that do not run together
    ax_e.set_xlabel(_wrap(f"J/token: median, bars {_bars(g)}; hatched = estimate", 50))
    ax_t.set_xlabel("tokens/s (median)")
    fig.suptitle(_wrap(f"{workload}: {common}" if common else workload, 110), fontsize=10)
    name = f"workload-{_slug(workload)}.png"
    _save(fig, out_dir / name)
    best = g[~partial].dropna(subset=["jpt"]).groupby("energy")["jpt"].idxmin()
    lines = [f"![{workload}: J/token and tokens/s per configuration]({name})", ""]
    for energy, i in best.items():
        name, jpt = g.loc[i, "config_name"], _g(g.loc[i, "jpt"])
        busy = f", {CONTENDED}" if flagged(g.loc[i, "contended"]) else ""
        lines.append(f"- Fewest J/token, {energy}: `{name}` ({jpt}{busy})")
    if partial.any():
        off = ", ".join(f"`{n}`" for n in g[partial]["config_name"])
        lines.append(f"- Not ranked on J/token ({PARTIAL}): {off}")
    if g["tokens_per_s"].notna().any():
        fastest = g.loc[g["tokens_per_s"].idxmax()]
        tps = _g(fastest["tokens_per_s"])
        busy = f", {CONTENDED}" if flagged(fastest["contended"]) else ""
        part = f", {PARTIAL}" if fastest["partial_model"] else ""
        lines.append(f"- Fastest: `{fastest['config_name']}` ({tps} tokens/s{busy}{part})")
    return lines + _waiting_table(g)


def _own_section(own: pd.DataFrame) -> list[str]:
    """A user's own measurements (`greenbench measure`): a table of their own, never ranked
    beside the training workloads (empty when there are none)."""
    if own.empty:
        return []
    lines = [
        "",
        "## Your own measurements (`greenbench measure`)",
        "",
        "What you measured yourself: an own loop (`greenbench.measure`, your training loop after "
        "its warm-up steps) or a whole process (`greenbench measure -- CMD`, everything the "
        "command did from start to exit: start-up, data loading and evaluation included). Tokens "
        "are what you declared. These are not training windows of greenbench's workloads, so "
        "they are kept off the leaderboard and the Pareto fronts and are compared only with "
        "themselves.",
        "",
        "| kind | name | device | energy | J/token (median [interval]) | tokens/s | repeats "
        "| trust |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in own.sort_values(["strategy", "config_name"]).itertuples():
        energy = energy_label(r.energy_source, r.energy_measured)
        jpt = f"{_g(r.joules_per_token)} [{_g(r.joules_per_token_ci_low)}, "
        jpt += f"{_g(r.joules_per_token_ci_high)}]"
        device = f"{r.device_type} ×{_g(r.devices)}"
        cells = [
            OWN_MEASUREMENT_KINDS.get(r.strategy, r.strategy),
            r.config_name,
            device,
            energy,
            jpt,
        ]
        cells += [_g(r.tokens_per_s), str(r.n_repeats), r.trust]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    lines += ["", f"Interval: {interval_caption(own['n_repeats'])}."]
    return lines


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


def _g(v: object) -> str:
    """A number in 4 significant digits; "n/a" when unknown (None, NaN)."""
    try:
        return "n/a" if v is None or math.isnan(float(v)) else f"{float(v):.4g}"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "n/a"
