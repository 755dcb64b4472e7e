"""`greenbench plan --run-top K`: run the planner's first K layouts here and report its regret.

The plan is made as `greenbench plan` makes it (`greenbench.planner.command.plan_command`,
printed the same way); its first K layouts that fit the device and that a strategy can run
here (the spec's rules: ``dp_replicate`` beside tensor or pipeline parallelism without shards
has no strategy; the hybrid strategy says why) become
configurations of the ``hybrid`` workload with the plan's model, batch and precision, on this
machine's device (``cpu`` for ``--device-type host``, else ``cuda``), and run through the
launcher's ordinary path (`greenbench.launcher.launch.run_specs`): stored in ``--db`` like any
run. ``--set KEY=VALUE`` adds settings to those runs (repeats, a shorter window).

Then, per layout, the predicted against the measured step time (the window's seconds over its
steps, median over repeats), and the regret

    measured step time of the planner's first pick / the best measured among the K − 1

(`greenbench.planner.scoring.regret`): 0 when the first pick was the fastest of those run. A
layout whose run failed measures nothing; when the first pick's failed the regret is unknown
and says so. K below 1 is refused in one line (exit 2) before anything is planned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from greenbench.config import setting_of
from greenbench.errors import SpecError
from greenbench.planner.command import plan_command, whole
from greenbench.planner.cost import Prediction
from greenbench.planner.host import HOST
from greenbench.planner.scoring import regret
from greenbench.planner.search import Plan
from greenbench.settings import (
    DataSettings,
    LayoutSettings,
    ModelSettings,
    RunSettings,
)

WORKLOAD = "hybrid"  #: the workload whose configurations run a layout (every strategy, auto)


def layout_settings(plan: Plan, prediction: Prediction, device: str) -> dict[str, Any]:
    """The settings that run ``prediction``'s layout of ``plan`` on ``device``."""
    s, b = plan.shape, plan.batch
    values = {
        (ModelSettings, "family"): s.family, (ModelSettings, "size"): s.size,
        (LayoutSettings, "text"): prediction.layout.text, (RunSettings, "device"): device,
        (RunSettings, "precision"): b.precision, (DataSettings, "seq_len"): b.seq_len,
        (DataSettings, "global_batch"): b.global_batch,
        (DataSettings, "micro_batch"): b.micro_batch, (DataSettings, "lengths"): "fixed",
    }  # fmt: skip
    return {setting_of(section, name).key: v for (section, name), v in values.items()}


def runnable(plan: Plan, k: int, device: str, sets: dict[str, Any]) -> tuple[list, list]:
    """The first ``k`` fitting layouts of ``plan`` a strategy can run, as (prediction, spec),
    and those passed over on the way, as (prediction, why)."""
    from greenbench.spec import expand

    chosen, passed = [], []
    for p in plan.ranked:
        if len(chosen) == k or not p.fits:
            break
        try:
            (spec,) = expand(WORKLOAD, [layout_settings(plan, p, device) | sets])
        except SpecError as exc:
            passed.append((p, str(exc)))
            continue
        chosen.append((p, spec))
    return chosen, passed


def plan_and_run_top(
    *, run_top: str | int, run_sets: tuple[str, ...] = (), db: Path, **options: Any
) -> float | None:
    """Plan (``options`` as `plan_command` takes them), run its first ``run_top`` runnable
    layouts into ``db`` and print their measured step times and the regret, which it returns
    (None: the first pick measured nothing). SpecError (exit 2) for a bad K or settings."""
    from greenbench.launcher.progress import run_with_progress
    from greenbench.planner.runs import step_seconds
    from greenbench.settings.written import parse_assignment
    from greenbench.store import get_run

    k = whole("--run-top", run_top, least=1)
    sets = dict(parse_assignment(a) for a in run_sets)
    plan = plan_command(db=db, **options)
    device = "cpu" if plan.device.name == HOST else "cuda"
    chosen, passed = runnable(plan, k, device, sets)
    console = Console(width=None if Console().is_terminal else 200)
    for p, why in passed:
        console.print(f"--run-top passes over {p.layout.text}: {why}")
    if not chosen:
        raise SpecError("--run-top: no layout of the plan fits the device and can run here")
    if len(chosen) < k:
        console.print(f"--run-top {k}: the plan has {len(chosen)} runnable layout(s); runs those")
    summary = run_with_progress([spec for _, spec in chosen], db)
    measured: list[float | None] = []
    title = f"the planner's first {len(chosen)} runnable layouts, run here and stored in {db}"
    table = Table("planner's rank", "layout", "run", "status", "predicted step s",
                  "measured step s", "error", title=title, title_justify="left")  # fmt: skip
    for (p, _), run_id, status in zip(chosen, summary.run_ids, summary.statuses, strict=True):
        step = step_seconds(get_run(db, run_id)) if status == "ok" else None
        measured.append(step)
        rank = plan.ranked.index(p) + 1
        table.add_row(
            str(rank), p.layout.text, run_id, status, f"{p.step_s:.3g}",
            "—" if step is None else f"{step:.3g}",
            "—" if step is None else f"{p.step_s / step - 1:+.0%}",
        )  # fmt: skip
    console.print(table)
    found = regret(measured)
    if found is None:
        console.print("regret: unknown (the planner's first pick measured nothing)")
    else:
        best = min((t, i) for i, t in enumerate(measured) if t is not None)[1]
        console.print(
            f"regret = measured step time of the first pick / best of the {len(chosen)} − 1 = "
            f"{found:.1%} (fastest measured: {chosen[best][0].layout.text})"
        )
    return found
