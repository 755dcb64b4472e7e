"""Terminal rendering for the read-only CLI commands (list, show, doctor), with rich."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


class _Stdout:
    """A rich console bound to the current stdout at each print: a terminal gets its own width,
    a pipe or file gets wide lines so nothing is cut to an ellipsis."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        import sys

        width = None if sys.stdout.isatty() else 200
        Console(width=width).print(*objects, **kwargs)


console = _Stdout()


def _fmt(value: Any, spec: str = ".4g") -> str:
    if value is None:
        return "—"
    try:
        if value != value:  # NaN
            return "—"
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def listing(what: str, db_path: Path, limit: int) -> None:
    if what == "suites":
        from greenbench.spec import available_suites, load_suite

        table = Table("suite", "description")
        for name in available_suites():
            table.add_row(name, load_suite(name).description)
        console.print(table)
    elif what == "workloads":
        from greenbench.workloads import WORKLOADS

        table = Table("workload", "question", "sweeps")
        for wl in WORKLOADS.values():
            sweeps = ", ".join(f"{k}={v}" for k, v in wl.sweep.items())
            table.add_row(wl.name, wl.question, sweeps)
        console.print(table)
    elif what == "settings":
        from greenbench.spec import DEFAULTS

        table = Table("setting", "default")
        for key, value in DEFAULTS.items():
            table.add_row(key, repr(value))
        console.print(table)
    else:
        from greenbench.store import list_runs

        runs = list_runs(db_path, limit=limit)
        if runs.empty:
            console.print(f"no runs in {db_path} yet: `greenbench run --suite smoke`")
            return
        table = Table(
            "run id",
            "status",
            "workload",
            "configuration",
            "layout",
            "repeats",
            "tokens/s",
            "J/token",
            "source",
            "started",
        )
        for r in runs.itertuples():
            source = r.energy_source or "—"
            estimated = r.energy_measured is False
            if estimated and "estimate" not in source:
                source += " (estimated)"
            table.add_row(
                r.run_id,
                r.status,
                r.workload,
                escape(str(r.config_name)),
                str(r.layout),
                str(r.n_repeats),
                _fmt(r.tokens_per_s_median, ",.0f"),
                ("≈ " if estimated else "") + _fmt(r.joules_per_token_median),
                source,
                str(r.started_at)[:19],
            )
        console.print(table)


def run_detail(db_path: Path, run_id: str) -> None:
    from greenbench.store import get_run

    run = get_run(db_path, run_id)
    console.print(
        f"[bold]{run['run_id']}[/bold]  {run['workload']}  {run['config_name']}  "
        f"status={run['status']}"
    )
    if run.get("error"):
        console.print(f"[red]error[/red] (rank {run.get('failed_rank')}): {escape(run['error'])}")
    for warning in run.get("warnings") or []:
        console.print(f"[yellow]warning[/yellow]: {escape(str(warning))}")
    if run.get("error_tail"):
        console.print(f"last lines of rank {run.get('failed_rank')}'s output:")
        console.print(escape(run["error_tail"]), highlight=False)
    if run.get("log_path"):
        console.print(f"worker logs: {escape(run['log_path'])}")
    console.print(
        f"device {escape(str(run['device_type']))} ×{run['nproc'] * run['nnodes']} "
        f"{run['precision']}; label={escape(str(run.get('label')))} git={run.get('git_sha')}; "
        f"peak {_fmt(run.get('peak_flops'))} FLOP/s ({run.get('peak_flops_source')})"
    )
    kernels = run.get("kernels") or {}
    quota = {True: "on", False: "off"}.get(run.get("rank_cpu_quota"), "—")
    console.print(
        f"layout {run['layout']} ({run['strategy']}); kernels "
        + (", ".join(f"{k}={v}" for k, v in sorted(kernels.items())) or "—")
        + f"; rank CPU quota {quota}"
    )
    config = run["config"] if isinstance(run["config"], dict) else json.loads(run["config"])
    console.print("settings: " + ", ".join(f"{k}={v}" for k, v in config["settings"].items()))
    results = run.get("results", [])
    if results:
        est = "" if all(r["energy_measured"] for r in results) else " [yellow](estimate)[/yellow]"
        table = Table(
            "repeat",
            "tokens",
            "seconds",
            "tokens/s",
            "J/token" + est,
            "net J/token",
            "MFU",
            "peak mem MiB",
            "p50 step s",
            "wait",
            "CO2 g",
            "note",
            title="repeats",
        )
        for r in results:
            table.add_row(
                str(r["repeat"]),
                str(r["tokens"]),
                _fmt(r["seconds"], ".3f"),
                _fmt(r["tokens_per_s"], ",.0f"),
                _fmt(r["joules_per_token"]),
                _fmt(r["net_joules_per_token"]),
                _fmt(r["mfu"], ".2%"),
                _fmt((r["peak_mem_bytes"] or 0) / 2**20, ",.0f"),
                _fmt(r["step_time_p50_s"], ".3f"),
                _fmt(r["wait_fraction"], ".1%"),
                _fmt(r["co2_g"], ".3g"),
                r.get("energy_note") or "",
            )
        console.print(table)
    comm = run.get("comm_records", [])
    if comm:
        table = Table(
            "repeat", "rank", "dim", "op", "calls", "MiB", "seconds", "waiting s",
            title="communication",
        )  # fmt: skip
        for c in comm:
            table.add_row(
                str(c["repeat"]),
                str(c["rank"]),
                c["dim"],
                c["op"],
                str(c["calls"]),
                _fmt(c["bytes"] / 2**20, ",.2f"),
                _fmt(c["seconds"], ".3f"),
                _fmt(c["wait_s"], ".3f"),
            )
        console.print(table)
    ranks = run.get("rank_results", [])
    if len({r["rank"] for r in ranks}) > 1:
        table = Table(
            "repeat", "rank", "tokens", "compute s", "comm s", "wait s", "energy J", title="ranks"
        )
        for r in ranks:
            table.add_row(
                str(r["repeat"]),
                str(r["rank"]),
                str(r["tokens"]),
                _fmt(r["compute_s"], ".3f"),
                _fmt(r["comm_s"], ".3f"),
                _fmt(r["wait_s"], ".3f"),
                _fmt(r["energy_j"], ".4g"),
            )
        console.print(table)


def doctor() -> None:
    from greenbench.energy.select import (
        cuda_device_names,
        describe_cuda,
        doctor_report,
        explain_choices,
    )

    names = cuda_device_names()
    probes = doctor_report()
    console.print(f"[bold]devices[/bold]: {describe_cuda(names)}")
    table = Table("energy source", "available", "why")
    for p in probes:
        table.add_row(p.source, "[green]yes[/green]" if p.available else "[red]no[/red]", p.reason)
    console.print(table)
    for line in explain_choices(probes, names).values():
        console.print(line)
