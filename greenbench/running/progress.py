"""Live progress of `greenbench run` (rich), and the closing summary table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from greenbench.running.launch import RunSummary, install_interrupt_handlers, run_specs
from greenbench.vocabulary import RunSpec


def run_with_progress(
    specs: list[RunSpec], db_path: Path, *, rdzv: dict[str, Any] | None = None, resume: bool = False
) -> RunSummary:
    """Run specs with a progress bar; print one line per finished run and a summary."""
    console = Console(stderr=True)
    install_interrupt_handlers()
    rows: list[tuple[str, str, Any]] = []
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("starting", total=len(specs))

        def on_event(kind: str, spec: RunSpec, info: dict[str, Any]) -> None:
            if kind == "start":
                progress.update(task, description=spec.name)
                return
            if kind == "skip":
                progress.advance(task)
                progress.console.print(f"{'skipped':<11} {'':12}  {spec.name} (already ok)")
                return
            progress.advance(task)
            status = info["status"]
            repeats = info.get("repeats") or []
            line = f"{status:<11} {info['run_id']}  {spec.name}"
            if repeats:
                r = sorted(repeats, key=lambda x: x.tokens_per_s)[len(repeats) // 2]
                jpt = (
                    f"{r.joules_per_token:.3g} J/token{'' if r.energy_measured else ' (estimate)'}"
                    if r.joules_per_token is not None
                    else "energy unavailable"
                )
                mfu = f"MFU {r.mfu:.1%}" if r.mfu is not None else "MFU n/a"
                line += f"  {r.tokens_per_s:,.0f} tok/s  {jpt}  {mfu}"
            if info.get("error"):
                line += f"  [red]{info['error']}[/red]"
            progress.console.print(line)
            rows.append((spec.name, status, info.get("error")))

        try:
            summary = run_specs(specs, db_path, on_event=on_event, rdzv=rdzv, resume=resume)
        except KeyboardInterrupt:
            console.print(f"[yellow]interrupted[/yellow]: finished runs are kept in {db_path}")
            raise SystemExit(130) from None
    ok = sum(s == "ok" for s in summary.statuses)
    console.print(f"{ok}/{len(summary.statuses)} configurations ok; results in {db_path}")
    if summary.failed:
        table = Table(title="failures")
        table.add_column("configuration")
        table.add_column("status")
        table.add_column("error")
        for name, status, error in rows:
            if status != "ok":
                table.add_row(name, status, error or "")
        console.print(table)
    return summary
