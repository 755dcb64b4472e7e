"""`greenbench run --dry-run`: what a run would do here, decided as the launcher decides it,
with nothing run and nothing written.

Every configuration the suite expands to is resolved for this machine
(`greenbench.launcher.resolve`, with ``measure`` off: no kernel built, no cost model fitted),
the suite's checks made (forced energy sources, node meters, power limits: a run they refuse
is refused here, exit 2), and each configuration put to the same questions as by the
launcher (`greenbench.launcher.launch.run_specs`): its runner's reasons it cannot run here
(`why_unsupported`, `why_too_few_devices` with ``--devices``, `why_it_cannot_fit` on the
peak this machine's calibration cache holds: nothing is calibrated), unless ``--force``, and
``--resume``'s question whether it is already stored ok. One configuration that cannot run,
or a suite none of whose configurations can, is refused as the run would refuse it. The rest
get an estimated time here (`greenbench.launcher.durations`: from this machine's stored runs,
or the model), the total their sum with what the launcher spends before the first
configuration.

The database is only read, and only if it exists (read-only; an absent file is not created).
No process is started and torch is not imported where no GPU driver is installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from greenbench.errors import DoesNotFit
from greenbench.launcher.durations import (
    MODEL,
    STORED,
    Estimate,
    History,
    clock,
    estimate_all,
    session_costs,
)
from greenbench.launcher.launch import finished_configs, run_names
from greenbench.launcher.power_limits import plan_limits
from greenbench.launcher.preflight import check_energy_sources, check_node_meters, nothing_can_run
from greenbench.launcher.resolve import resolve_spec
from greenbench.launcher.runners import Runners
from greenbench.settings import spec_key
from greenbench.settings.runspec import RunSpec

RUNS, SKIPPED = "runs", "skipped"


@dataclass(frozen=True, slots=True)
class PlannedConfig:
    """One configuration of the plan: its name, whether it runs or is skipped and why, and
    its estimate (None where skipped)."""

    name: str
    spec: RunSpec
    plan: str  # RUNS or SKIPPED
    why: str = ""
    estimate: Estimate | None = None


@dataclass(slots=True)
class LocalPlan:
    """What `greenbench run` would do here: every configuration in order, and what the
    launcher spends before the first (``before``: (what, seconds))."""

    db_path: Path
    rows: list[PlannedConfig] = field(default_factory=list)
    before: list[tuple[str, float]] = field(default_factory=list)

    @property
    def running(self) -> list[PlannedConfig]:
        return [r for r in self.rows if r.plan == RUNS]

    @property
    def total_s(self) -> float:
        """Seconds of the known estimates and of what comes before the first configuration."""
        known = [r.estimate.seconds for r in self.running if r.estimate and r.estimate.seconds]
        return sum(known) + sum(s for _, s in self.before)

    @property
    def unknown(self) -> int:
        """Configurations that run with no estimate."""
        return sum(r.estimate is None or r.estimate.seconds is None for r in self.running)

    def count(self, source: str) -> int:
        return sum(r.estimate is not None and r.estimate.source == source for r in self.running)


def local_plan(
    specs: list[RunSpec],
    db_path: Path,
    *,
    resume: bool = False,
    force: bool = False,
    devices: int | None = None,
) -> LocalPlan:
    """The plan of running ``specs`` here into ``db_path`` (module docstring). Refuses as the
    run would: SpecError, MeterUnavailable, PowerLimitRefused, DoesNotFit (exit 2)."""
    specs = [resolve_spec(spec, measure=False) for spec in specs]
    check_energy_sources(specs)
    check_node_meters(specs)
    specs, _ = plan_limits(specs)
    runners = Runners()
    chosen = [runners.for_spec(spec) for spec in specs]
    peaks = [runner.peak(spec, measure=False) for runner, spec in zip(chosen, specs, strict=True)]
    refused = {} if force else {
        i: why
        for i, (runner, spec, peak) in enumerate(zip(chosen, specs, peaks, strict=True))
        if (why := runner.why_not_here(spec, peak, devices)) is not None
    }  # fmt: skip
    if len(specs) == 1 and refused:
        raise DoesNotFit(f"{specs[0].name} {refused[0]} (--force runs it anyway)")
    if refused and len(refused) == len(specs):
        raise DoesNotFit(nothing_can_run(list(refused.values())))
    done = finished_configs(db_path) if resume else set()
    skipped: dict[int, str] = {
        i: f"cannot fit this machine: {why} (--force runs it anyway)" for i, why in refused.items()
    }
    for i, spec in enumerate(specs):
        if i not in skipped and (spec_key(spec), spec.label) in done:
            skipped[i] = "already stored ok with the same settings and label (--resume)"
    runs = [i not in skipped for i in range(len(specs))]
    estimates = estimate_all(specs, History.read(db_path), [p.flops for p in peaks], runs)
    name = run_names(specs)
    plan = LocalPlan(db_path, before=session_costs(specs, runs))
    for i, spec in enumerate(specs):
        if i in skipped:
            plan.rows.append(PlannedConfig(name(spec), spec, SKIPPED, skipped[i]))
        else:
            plan.rows.append(PlannedConfig(name(spec), spec, RUNS, estimate=estimates[i]))
    return plan


def plan_table(plan: LocalPlan) -> Table:
    """The plan as a table: a row per configuration, its estimate and where it came from, or
    why it is skipped."""
    from greenbench.reporting.terminal import cell

    table = Table("#", "configuration", "plan", "estimate", "from / why", title_justify="left")
    table.title = f"dry run: {len(plan.rows)} configuration(s) into {plan.db_path}"
    for i, row in enumerate(plan.rows, 1):
        if row.plan == SKIPPED:
            table.add_row(str(i), cell(row.name), "[yellow]skipped[/yellow]", "—", cell(row.why))
            continue
        estimate = row.estimate
        if estimate is None:
            table.add_row(str(i), cell(row.name), "runs", "—", "unknown")
            continue
        source = cell(estimate.label)
        if estimate.source != STORED:
            source += f": {cell(estimate.how)}"
        table.add_row(str(i), cell(row.name), "runs", cell(estimate.text()), source)
    return table


def summary_lines(plan: LocalPlan) -> list[str]:
    """The plan's closing lines: what comes first, the total and what it is made of."""
    lines = [f"before the first configuration: {what}, ~{clock(s)}" for what, s in plan.before]
    running = plan.running
    skipped = len(plan.rows) - len(running)
    parts = [f"{plan.count(STORED)} from stored runs", f"{plan.count(MODEL)} estimated (model)"]
    if plan.unknown:
        parts.append(f"{plan.unknown} unknown, not counted")
    bound = any(r.estimate and r.estimate.at_most for r in running)
    total = f"{'≤ ' if bound else '~'}{clock(plan.total_s)}"
    lines.append(
        f"total: {total} for {len(running)} configuration(s) that run ({', '.join(parts)})"
        + (f"; {skipped} skipped" if skipped else "")
    )
    lines.append("dry run: nothing was run and nothing written")
    return lines


def print_plan(plan: LocalPlan) -> None:
    """Print ``plan`` on stdout (a rich table and its summary lines)."""
    from rich.markup import escape

    from greenbench.reporting.terminal import console

    console.print(plan_table(plan))
    for line in summary_lines(plan):
        console.print(escape(line))
