"""Live progress of `greenbench run` (rich), and the closing summary table.

Configuration names, errors and paths come from users and exceptions: they are ``escape``d before
rich reads the line as markup, so an error such as ``[red]x[/red]`` or ``[1, 2]`` is printed as
written and never breaks the progress display or the failures table at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from greenbench.aggregate import run_medians
from greenbench.aggregate.target import target_medians
from greenbench.launcher.launch import (
    RunOptions,
    RunSummary,
    install_interrupt_handlers,
    run_specs,
)
from greenbench.settings import SEED_KEY
from greenbench.settings.runspec import RunSpec
from greenbench.vocabulary import energy_label
from greenbench.vocabulary.flops import mfu_header
from greenbench.vocabulary.trust import Trust


def run_with_progress(
    specs: list[RunSpec],
    db_path: Path,
    *,
    rdzv: dict[str, Any] | None = None,
    resume: bool = False,
    force: bool = False,
    devices: int | None = None,
) -> RunSummary:
    """Run specs with a progress bar; print one line per finished run and a summary."""
    console = Console(stderr=True)
    install_interrupt_handlers()
    rows: list[tuple[str, str, Any]] = []
    name = run_names(specs)
    with progress_bar(console) as progress:
        task = progress.add_task("starting", total=len(specs))

        def on_event(kind: str, spec: RunSpec | None, info: dict[str, Any]) -> None:
            if kind == "wait":  # another process holds the database; the write is waiting
                waited = f"{info['waited_s']:.0f} s"
                progress.update(
                    task, description=f"database locked by another process; waiting… ({waited})"
                )
                return
            if kind == "note":
                progress.console.print(f"[yellow]{escape(info['message'])}[/yellow]")
                return
            if kind == "start":
                progress.update(task, description=escape(name(spec)))
                return
            if kind == "skip":
                progress.advance(task)
                shown = escape(name(spec))
                progress.console.print(f"{'skipped':<11} {'':12}  {shown} (already ok)")
                return
            progress.advance(task)
            status = info["status"]
            line = finished_line(
                status, info["run_id"], name(spec), info.get("repeats") or [], info.get("error"),
                **{k: info.get(k) for k in CONTENTION_KEYS},
            )  # fmt: skip
            progress.console.print(line)
            rows.append((name(spec), status, info.get("error")))

        try:
            summary = run_specs(
                specs,
                db_path,
                options=RunOptions(rdzv=rdzv, resume=resume, force=force, devices=devices),
                on_event=on_event,
            )
        except KeyboardInterrupt:
            kept = escape(str(db_path))
            console.print(f"[yellow]interrupted[/yellow]: finished runs are kept in {kept}")
            raise SystemExit(130) from None
    print_summary(console, rows, db_path)
    return summary


def run_names(specs: Sequence[RunSpec]) -> Callable[[RunSpec], str]:
    """How progress names a spec's run: its configuration's name, and its seed where the specs
    run several (``greenbench run --seeds``), for a configuration's name does not hold it."""

    def seed(spec: RunSpec) -> object:
        return getattr(spec, "settings", {}).get(SEED_KEY)

    if len({seed(spec) for spec in specs}) <= 1:
        return lambda spec: spec.name
    return lambda spec: f"{spec.name} seed={seed(spec)}"


def progress_bar(console: Console) -> Progress:
    """The bar long greenbench work shows: what it is at, done of total, time so far. Only on
    a terminal: elsewhere (a pipe, a log file) the bar shows nothing, and rich would still end
    it with an empty line, which would precede a refusal's one line."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_interactive,
    )


#: what the launcher's "end" event says of the machine while the run ran (`finished_line`)
CONTENTION_KEYS = ("contended", "others_busy_cores", "other_greenbench")


def finished_line(
    status: str,
    run_id: str,
    name: str,
    repeats: Sequence[Any],
    error: str | None,
    *,
    contended: bool | None = None,
    others_busy_cores: float | None = None,
    other_greenbench: int | None = None,
) -> str:
    """One finished configuration as rich markup: status, run id, name, and from its
    ``repeats`` (anything with ``tokens_per_s``, ``joules_per_token``, ``mfu``,
    ``energy_source``, ``energy_measured``, ``idle_note``) the medians that are stored and
    `list runs` shows (`aggregate.run_medians`), then the run's trust markers (contended, an
    unreliable idle baseline, too few repeats for a 95 % interval: `vocabulary.trust`); or its
    error."""
    line = escape(f"{status:<11} {run_id}  {name}")
    if repeats:
        first = repeats[0]
        medians = run_medians(repeats)
        measured = bool(first.energy_measured)
        label = energy_label(first.energy_source, measured)
        jpt = medians["joules_per_token"]
        energy = (
            f"{jpt:.3g} J/token{'' if measured else f' ({label})'}"
            if jpt is not None
            else "energy unavailable"
        )
        shown = mfu_header()  # the convention every view shows (`vocabulary.flops`)
        mfu = f"{shown} {medians['mfu']:.1%}" if medians["mfu"] is not None else f"{shown} n/a"
        tps = medians["tokens_per_s"]
        line += f"  {tps:,.0f} tok/s  {escape(energy)}  {mfu}  (median of {len(repeats)} repeats)"
        line += escape(to_target(repeats))
        trust = Trust.of(
            {
                "energy_source": first.energy_source,
                "energy_measured": measured,
                "contended": contended,
                "others_busy_cores": others_busy_cores,
                "other_greenbench": other_greenbench,
                "idle_power_w": first.idle_power_w,
                "n_idle_unreliable": sum(bool(getattr(r, "idle_note", "")) for r in repeats),
            },
            n_repeats=len(repeats),
        )
        if trust.mark():
            line += f"  [yellow]{escape(trust.mark())}[/yellow]"
    if error:
        line += f"  [red]{escape(str(error))}[/red]"
    return line


def to_target(repeats: Sequence[Any]) -> str:
    """A run to a target loss in a few words ("" for a window run): the target, how many
    repeats reached it, and the medians to it that `list runs` shows
    (`greenbench.aggregate.target.target_medians`: unknown where too few reached)."""
    target = next((r.target_loss for r in repeats if getattr(r, "target_loss", None)), None)
    if target is None:
        return ""
    medians = target_medians(repeats)
    text = f"  target {target:.4g}: reached {medians['n_reached']}/{medians['n_to_target']}"
    seconds, joules = medians["seconds_to_target"], medians["energy_to_target_j"]
    if seconds is not None:
        text += f", {seconds:.3g} s"
        label = "" if getattr(repeats[0], "energy_measured", False) else " (estimate)"
        text += f", {joules:.3g} J{label}" if joules is not None else ", energy unavailable"
        text += " to it (median)"
    elif medians["n_reached"]:
        text += " (too few for a median)"
    else:
        best = medians["best_val_loss"]
        text += f", not reached (best {best:.4g})" if best is not None else ", not reached"
    return text


def print_summary(console: Console, rows: list[tuple[str, str, Any]], db_path: Path) -> None:
    """How many configurations are ok (and skipped), where the results are, and a table of
    those not ok with their errors; ``rows`` are (name, status, error)."""
    ok = sum(status == "ok" for _, status, _ in rows)
    skipped = sum(status == "skipped" for _, status, _ in rows)
    console.print(
        f"{ok}/{len(rows)} configurations ok"
        + (f", {skipped} skipped (cannot run on this machine)" if skipped else "")
        + f"; results in {escape(str(db_path))}"
    )
    if any(status != "ok" for _, status, _ in rows):
        table = Table(title="not ok")
        table.add_column("configuration")
        table.add_column("status")
        table.add_column("error")
        for name, status, error in rows:
            if status != "ok":
                table.add_row(escape(name), escape(status), escape(str(error or "")))
        console.print(table)
