"""Terminal rendering of a plan (rich): the ranked table of predicted layouts, the sources of
every figure it stands on, and the measured layouts with the prediction's error.

Every predicted column says "predicted" in its header, and the title says the figures are
predictions of the planner's model: the project never shows a prediction as a measurement.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from greenbench.planner.measured import Measured
from greenbench.planner.search import Plan

MISSING = "—"
RANK_WORDS = {"energy": "J/token", "time": "step time", "memory": "memory per device"}


def _console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 200)


def _gib(n: float) -> str:
    gib = n / 2**30
    return f"{gib:,.1f}" if gib >= 10 else f"{gib:.3g}"


def _num(x: float) -> str:
    """Whole numbers from 100 up, three significant digits below (a CPU's 2 W, 0.4 GB/s)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _flops(x: float) -> str:
    return f"{_num(x / 1e12)} TFLOP/s" if x >= 1e12 else f"{_num(x / 1e9)} GFLOP/s"


def _pct(x: float | None) -> str:
    return MISSING if x is None else f"{x:+.0%}"


def plan_table(plan: Plan, top: int, measured: list[Measured] | None = None) -> Table:
    """The ranked layouts (the first ``top`` and every Pareto layout; ``top`` 0: all)."""
    s, d = plan.shape, plan.device
    table = Table(
        title=f"{s.family}/{s.size} on {plan.devices} × {d.label}: predicted by greenbench's "
        "α–β, memory and power model (not measured)",
        title_justify="left",
    )
    headers = [
        "rank",
        "layout",
        "pareto",
        "predicted step s",
        "predicted tokens/s",
        "predicted GiB/device",
        f"fits (≤ {_gib(d.usable_memory_bytes)} GiB)",
        "predicted J/token",
        "bubble",
        "comm",
    ]
    if measured is not None:
        headers.append("measured here")
    for header in headers:
        table.add_column(header, justify="left" if header in ("layout", "pareto") else "right")
    seen = {m.layout for m in measured or []}
    for i, p in enumerate(plan.ranked, start=1):
        on_front = p.layout in plan.pareto
        if top and i > top and not on_front:
            continue
        row = [
            str(i),
            p.layout.text,
            "★" if on_front else "",
            f"{p.step_s:,.3g}",
            _num(p.tokens_per_s),
            _gib(p.memory.total_b),
            "yes" if p.fits else "no",
            f"{p.joules_per_token:.3g}",
            f"{p.bubble_s / p.step_s:.0%}",
            f"{p.comm_s / p.step_s:.0%}",
        ]
        if measured is not None:
            row.append("yes" if p.layout in seen else "")
        table.add_row(*row)
    return table


def sources_table(plan: Plan) -> Table:
    """Where every figure of the device model comes from."""
    d = plan.device
    values: dict[str, Any] = {
        "peak FLOP/s": _flops(d.peak_flops),
        "sustained FLOP/s": _flops(d.sustained_flops),
        "memory": f"{_num(d.memory_bytes / 1e9)} GB",
        "fast link": f"{_num(1 / d.fast.beta_s_per_byte / 1e9)} GB/s, "
        f"α {d.fast.alpha_s * 1e6:.3g} µs ({d.fast_domain} device(s) per fast domain)",
        "network": f"{_num(1 / d.network.beta_s_per_byte / 1e9)} GB/s, "
        f"α {d.network.alpha_s * 1e6:.3g} µs",
        "busy power": f"{_num(d.power.busy_w)} W",
        "idle power": f"{_num(d.power.idle_w)} W",
        "power limit": f"{d.power_limit_w:g} W" if d.power_limit_w is not None else "",
    }
    for family, rate in d.rates.items():
        kernel = plan.shape.planner.kernel if family == plan.shape.family else "kernel"
        values[f"{family} FLOP/s"] = (
            f"{_flops(rate.dense_flops)} matmuls, {_flops(rate.kernel_flops)} {kernel or 'kernel'}"
        )
    table = Table("figure", "value", "source", title="what the predictions stand on",
                  title_justify="left")  # fmt: skip
    for name, source in d.sources.items():
        table.add_row(name, values.get(name, ""), escape(source))
    return table


def measured_table(found: list[Measured]) -> Table:
    """Measured layouts of this host beside their predictions, with the error."""
    table = Table(
        "run",
        Column("layout", no_wrap=True),
        "seq × batch / micro",
        "repeats",
        "measured tokens/s",
        "predicted tokens/s",
        "error",
        "measured J/token",
        "predicted J/token",
        "error",
        "measured GiB/device",
        "predicted GiB/device",
        "error",
        title="measured on this host (medians of the stored repeats) against the prediction "
        "for the same configuration; error = predicted / measured − 1; GiB/device is the model "
        "state counted from tensors where the run counted it, else the peak device memory",
        title_justify="left",
    )
    for m in found:
        e = m.errors()
        p = m.predicted
        table.add_row(
            escape(m.run_id),
            m.layout.text,
            f"{m.batch.seq_len} × {m.batch.global_batch} / {m.batch.micro_batch}",
            str(m.repeats),
            _num(m.tokens_per_s),
            _num(p.tokens_per_s),
            _pct(e["tokens_per_s"]),
            MISSING if m.joules_per_token is None else f"{m.joules_per_token:.3g}",
            f"{p.joules_per_token:.3g}",
            _pct(e["joules_per_token"]),
            MISSING if m.memory_bytes[0] is None else _gib(m.memory_bytes[0]),
            _gib(m.memory_bytes[1]),
            _pct(e["memory"]),
        )
    return table


def print_plan(plan: Plan, *, top: int, measured: list[Measured] | None = None) -> None:
    """Print the plan, the sources, a line on what was left out, and the measured layouts."""
    console = _console()
    b, d = plan.batch, plan.device
    limit = f", power limit {d.power_limit_w:g} W" if d.power_limit_w is not None else ""
    console.print(
        f"seq {b.seq_len}, global batch {b.global_batch} ({b.tokens:,} tokens per step), "
        f"micro-batch {b.micro_batch}, {b.precision}{limit}; ranked by predicted "
        f"{RANK_WORDS[plan.rank_by]}, layouts that fit first"
    )
    console.print(plan_table(plan, top, measured))
    shown = sum(
        1 for i, p in enumerate(plan.ranked, 1) if not top or i <= top or p.layout in plan.pareto
    )
    fitting = sum(p.fits for p in plan.ranked)
    console.print(
        f"{len(plan.ranked)} valid layouts ({fitting} fit the device), {shown} shown "
        f"(--top 0 shows all); {plan.rejected} ruled out by the model's or the batch's rules; "
        f"★ = Pareto set of predicted time × energy × memory among those that fit"
    )
    console.print(sources_table(plan))
    if measured is not None:
        if measured:
            console.print(measured_table(measured))
        else:
            console.print(
                "no run of this model on this many devices of this type is stored for this host"
            )
