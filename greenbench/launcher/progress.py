"""Live progress of `greenbench run` (rich), and the closing summary table.

While a suite runs the bar names the configuration running, its phase (the launcher's own and
the ranks', `greenbench.launcher.phases`) and the ETAs of the configuration and of the run,
from the estimates `greenbench run --dry-run` prints (`greenbench.launcher.durations`),
rescaled as configurations finish (`LiveRun`); away from a terminal each phase change is one
plain line. Each finished configuration prints one line with what is stored.

Configuration names, errors and paths come from users and exceptions: they are ``escape``d before
rich reads the line as markup, so an error such as ``[red]x[/red]`` or ``[1, 2]`` is printed as
written and never breaks the progress display or the failures table at the end.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from greenbench.aggregate import run_medians
from greenbench.aggregate.target import target_medians
from greenbench.errors import GreenbenchError
from greenbench.launcher.durations import STORED, Eta, History, clock, estimate_all
from greenbench.launcher.launch import (
    RunOptions,
    RunSummary,
    install_interrupt_handlers,
    run_names,
    run_specs,
)
from greenbench.launcher.phases import RunPhases
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
    """Run specs with a progress bar; print one line per finished run and a summary. The bar
    names the configuration running, its phase and the ETAs (`LiveRun`); away from a terminal
    each phase change is one plain line instead."""
    console = Console(stderr=True)
    install_interrupt_handlers()
    rows: list[tuple[str, str, Any]] = []
    name = run_names(specs)
    with progress_bar(console, eta=True) as progress:
        live = LiveRun(progress, progress.add_task("starting", total=len(specs), eta=""), db_path)

        def on_event(kind: str, spec: RunSpec | None, info: dict[str, Any]) -> None:
            if kind == "wait":  # another process holds the database; the write is waiting
                waited = f"{info['waited_s']:.0f} s"
                live.describe(f"database locked by another process; waiting… ({waited})")
                return
            if kind == "note":
                progress.console.print(f"[yellow]{escape(info['message'])}[/yellow]")
                return
            if kind == "plan":
                live.plan(info["specs"], info["runs"], info["peaks"])
                return
            if kind == "start":
                live.start(spec, name(spec))
                return
            if kind == "skip":
                progress.advance(live.task)
                shown = escape(name(spec))
                progress.console.print(f"{'skipped':<11} {'':12}  {shown} (already ok)")
                return
            live.end(spec)
            status = info["status"]
            line = finished_line(
                status, info["run_id"], name(spec), info.get("repeats") or [], info.get("error"),
                **{k: info.get(k) for k in CONTENTION_KEYS},
            )  # fmt: skip
            progress.console.print(line)
            rows.append((name(spec), status, info.get("error")))

        try:
            with live.polling():
                summary = run_specs(
                    specs,
                    db_path,
                    options=RunOptions(rdzv=rdzv, resume=resume, force=force, devices=devices),
                    on_event=on_event,
                    phases=live.phases,
                )
        except KeyboardInterrupt:
            kept = escape(str(db_path))
            console.print(f"[yellow]interrupted[/yellow]: finished runs are kept in {kept}")
            raise SystemExit(130) from None
    print_summary(console, rows, db_path)
    return summary


#: seconds between two looks at the current configuration's phase
POLL_S = 0.5


class LiveRun:
    """What the progress display knows of the run: the configuration running, its phase
    (`greenbench.launcher.phases.RunPhases`, polled by a thread of its own every `POLL_S`) and
    the ETAs of the configuration and of the run (`greenbench.launcher.durations.Eta`, from the
    estimates `greenbench run --dry-run` prints, once the launcher has told its plan). On a
    terminal the bar shows them and is redrawn; elsewhere each phase change prints one plain
    line (a CI log gets a line per change, not a redraw per poll)."""

    def __init__(self, progress: Progress, task: Any, db_path: Path) -> None:
        self.progress, self.task, self.db_path = progress, task, db_path
        self.phases = RunPhases()
        self.eta: Eta | None = None
        self._lock = threading.RLock()
        self._index: dict[int, int] = {}
        self._current: tuple[int | None, str, float] | None = None  # index, name, start
        self._shown: str | None = None

    def plan(self, specs: list[RunSpec], runs: list[bool], peaks: list[float | None]) -> None:
        """The launcher's plan: estimate each configuration that runs (this machine's stored
        runs or the model) and say the total."""
        try:
            history = History.read(self.db_path, timeout_s=1.0)  # an ETA is not worth a wait
            estimates = estimate_all(specs, history, peaks, runs)
        except GreenbenchError:  # the database could not be read now: no ETA, the run goes on
            return
        with self._lock:
            self._index = {id(spec): i for i, spec in enumerate(specs)}
            self.eta = Eta({i: e.seconds for i, e in enumerate(estimates) if e is not None})
            known = [e for e in estimates if e is not None and e.seconds is not None]
        if not known:
            return
        stored = sum(e.source == STORED for e in known)
        total = sum(e.seconds or 0.0 for e in known)
        self.progress.console.print(
            f"estimated ~{clock(total)} for {len(known)} configuration(s) "
            f"({stored} from stored runs, {len(known) - stored} estimated (model))"
        )

    def start(self, spec: RunSpec | None, name: str) -> None:
        with self._lock:
            index = self._index.get(id(spec))
            self._current = (index, name, time.monotonic())
            self._shown = None
        self.describe(escape(name))
        self.refresh()

    def end(self, spec: RunSpec | None) -> None:
        with self._lock:
            index = self._index.get(id(spec))
            current = self._current
            if current is not None and current[0] == index and index is not None and self.eta:
                self.eta.finish(index, time.monotonic() - current[2])
            self._current = None
        self.progress.advance(self.task)
        self.refresh()

    def describe(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def eta_text(self) -> str:
        """The ETAs, short enough for a terminal's line: "config ~40 s · run ~3 min 10 s left"
        ("config over its estimate" past it; "" without estimates)."""
        with self._lock:
            if self.eta is None:
                return ""
            index, elapsed = None, 0.0
            if self._current is not None:
                index, elapsed = self._current[0], time.monotonic() - self._current[2]
            mine, total = self.eta.left(index, elapsed)
        parts = []
        if mine is not None:
            parts.append(f"config ~{clock(mine)}" if mine > 0 else "config over its estimate")
        if total is not None:
            parts.append(f"run ~{clock(total)}")
        return " · ".join(parts) + " left" if parts else ""

    def refresh(self) -> None:
        """Show the current phase (a line where it changed, away from a terminal) and ETAs."""
        phase = self.phases.current()
        eta = self.eta_text()
        self.progress.update(self.task, eta=eta)
        with self._lock:
            current = self._current
            changed = phase is not None and phase != self._shown
            if changed:
                self._shown = phase
        if not changed or phase is None:
            return
        if self.progress.console.is_interactive:
            self.describe(escape(f"{current[1]} · {phase}" if current else phase))
        elif current is not None:  # a log gets a configuration's phases (a refusal before the
            # first configuration stays one line)
            line = f"  {current[1]}: {phase}" + (f" ({eta})" if eta else "")
            self.progress.console.print(escape(line), soft_wrap=True)  # one line, for logs

    @contextlib.contextmanager
    def polling(self) -> Iterator[None]:
        """Refresh every `POLL_S` seconds in a thread of its own while the block runs."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(POLL_S):
                self.refresh()

        thread = threading.Thread(target=loop, name="greenbench-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def progress_bar(console: Console, *, eta: bool = False) -> Progress:
    """The bar long greenbench work shows: what it is at, done of total, time so far (and,
    with ``eta``, the task's ``eta`` field). Only on a terminal: elsewhere (a pipe, a log file)
    the bar shows nothing, and rich would still end it with an empty line, which would precede
    a refusal's one line."""
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    if eta:
        columns.append(TextColumn("{task.fields[eta]}"))
    return Progress(
        *columns,
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
