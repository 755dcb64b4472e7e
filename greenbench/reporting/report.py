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
part of the model per token: it is on no leaderboard, front or workload ranking (the leaderboard
names it and says why), and is ranked only within its own question in the SkipPipe section, on
useful tokens beside the plain figures. A database with no measured training
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
The report is its header (title, provenance, or the note that there is no measured leaderboard)
and then every registered section (`greenbench.reporting.sections.REPORT_SECTIONS`, each a
`greenbench.reporting.section.ReportSection`) that applies, in order. Plots use matplotlib's Agg
canvas directly (`greenbench.reporting.figures`), so reports can be written from any thread or
process.

The folder is built under a temporary name beside the target and renamed into place when complete
(``greenbench.outputs``): a failure leaves no half-written report, and an existing non-empty folder
is replaced only with ``force``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

import greenbench
from greenbench.errors import StoreError
from greenbench.outputs import atomic_folder, resolve_target
from greenbench.reporting.leaderboard import (
    leaderboard,
    own_measurement_mask,
    own_measurements,
    simulated_mask,
    training_rows,
)
from greenbench.reporting.refs import load_ref, query_results
from greenbench.reporting.section import ConfigLink, ReportContext
from greenbench.reporting.sections import REPORT_SECTIONS
from greenbench.vocabulary import EMULATED_SOURCE, energy_label
from greenbench.vocabulary.flops import SHOWN, mfu_header


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
    raw = report_rows(db_path, ref)
    with atomic_folder(target, swap=_only_report_files(target), last="README.md") as tmp:
        context = report_context(db_path, tmp, raw, whole_database=ref is None)
        lines = [f"# {title}", "", *header_lines(context)]
        for section in REPORT_SECTIONS:
            if section.applies(context):
                lines += section.render(context)
        (tmp / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target / "README.md"


def report_rows(db_path: str | Path, ref: str | None = None) -> pd.DataFrame:
    """Every repeat of the finished runs in ``db_path`` (or those ``ref`` names); a StoreError
    when there is none, so nothing is written for an empty database."""
    raw = load_ref(db_path, ref) if ref else query_results(db_path)
    if raw.empty:
        raise StoreError(f"{db_path} holds no finished runs: run `greenbench run --suite smoke`")
    return raw


def report_context(
    db_path: str | Path,
    out_dir: Path,
    raw: pd.DataFrame,
    *,
    whole_database: bool,
    link: ConfigLink | None = None,
) -> ReportContext:
    """What every section reads, over the repeats ``raw`` (`report_rows`); figures go to
    ``out_dir``, and a configuration's name links to ``link``'s page where one is given."""
    measured = training_rows(raw)
    return ReportContext(
        db_path=db_path,
        out_dir=out_dir,
        raw=raw,
        measured=measured,
        table=summarise(measured),
        own=own_measurements(raw),
        whole_database=whole_database,
        link=link,
    )


def header_lines(context: ReportContext) -> list[str]:
    """What the report says under its title: where its figures come from (runs, commits,
    devices, whether energy is measured or estimated, the MFU peak), or, with no measured
    training run, what the database holds and that there is no leaderboard."""
    if context.table.empty:
        return _without_leaderboard(context.raw)
    return _provenance(context.measured, context.table)


def _only_report_files(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but what a report writes (README.md and PNGs)."""
    if not folder.is_dir():
        return False
    return all(
        p.is_file() and not p.is_symlink() and (p.name == "README.md" or p.suffix == ".png")
        for p in folder.iterdir()
    )


def _without_leaderboard(raw: pd.DataFrame) -> list[str]:
    """The header of a database with no measured training run: what it holds, and a note that
    there is no measured leaderboard (nor Pareto front); the sections show those runs."""
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
    return [
        f"Generated {now} by greenbench {greenbench.__version__} from {len(runs)} runs "
        f"({len(raw)} repeats): {', '.join(kinds)}.",
        "",
        "> **No measured leaderboard.** This database holds no measured training run, so there is "
        "no leaderboard, Pareto front or per-workload ranking. The sections below show what it "
        "holds: simulated and emulated figures come from a model, not a measurement, and are "
        "labelled so; they are never ranked as measurements. Measure a workload "
        "(`greenbench run`) to get a leaderboard.",
    ]


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
            "energy counter was read), not a measurement: time multiplied by modelled power, so "
            "an energy ratio here is a time ratio. The findings are stated in time; estimated "
            "energy stands beside them, labelled.",
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
        + f"MFU is relative to the peak FLOP/s from: {', '.join(peaks)}. {mfu_header(SHOWN)}: "
        f"model FLOPs under {SHOWN.label}'s convention ({SHOWN.doc}), the same for every family.",
    ]
    return lines
