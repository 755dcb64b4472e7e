"""Live progress of `greenbench run` (rich), and the closing summary table.

Configuration names, errors and paths come from users and exceptions: they are ``escape``d before
rich reads the line as markup, so an error such as ``[red]x[/red]`` or ``[1, 2]`` is printed as
written and never breaks the progress display or the failures table at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from greenbench.running.launch import RunSummary, install_interrupt_handlers, run_specs
from greenbench.vocabulary import RunSpec, energy_label


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
                progress.update(task, description=escape(spec.name))
                return
            if kind == "skip":
                progress.advance(task)
                progress.console.print(f"{'skipped':<11} {'':12}  {escape(spec.name)} (already ok)")
                return
            progress.advance(task)
            status = info["status"]
            repeats = sorted(info.get("repeats") or [], key=lambda x: x.tokens_per_s)
            median = repeats[len(repeats) // 2] if repeats else None
            line = finished_line(status, info["run_id"], spec.name, median, info.get("error"))
            progress.console.print(line)
            rows.append((spec.name, status, info.get("error")))

        try:
            summary = run_specs(
                specs,
                db_path,
                on_event=on_event,
                rdzv=rdzv,
                resume=resume,
                force=force,
                devices=devices,
            )
        except KeyboardInterrupt:
            kept = escape(str(db_path))
            console.print(f"[yellow]interrupted[/yellow]: finished runs are kept in {kept}")
            raise SystemExit(130) from None
    print_summary(console, rows, db_path)
    return summary


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


def finished_line(
    status: str, run_id: str, name: str, median: Any | None, error: str | None
) -> str:
    """One finished configuration as rich markup: status, run id, name, and from its median
    repeat (anything with ``tokens_per_s``, ``joules_per_token``, ``energy_source``,
    ``energy_measured`` and ``mfu``) its throughput, energy per token and MFU, or its error."""
    line = escape(f"{status:<11} {run_id}  {name}")
    if median is not None:
        r = median
        label = energy_label(r.energy_source, r.energy_measured)
        jpt = (
            f"{r.joules_per_token:.3g} J/token{'' if r.energy_measured else f' ({label})'}"
            if r.joules_per_token is not None
            else "energy unavailable"
        )
        mfu = f"MFU {r.mfu:.1%}" if r.mfu is not None else "MFU n/a"
        line += f"  {r.tokens_per_s:,.0f} tok/s  {jpt}  {mfu}"
    if error:
        line += f"  [red]{escape(str(error))}[/red]"
    return line


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
