"""What the CLI prints about greenbench itself and this machine: the suites, workloads and
settings it offers (`greenbench list suites|workloads|settings`) and what the machine can
measure (`greenbench doctor`). These views read the spec and probe meters (which import torch),
so they stand at the CLI's level, above the torch-free views of stored results in `reporting`.
"""

from __future__ import annotations

from rich.table import Table

from greenbench.reporting.terminal import cell, console


def catalog(what: str) -> None:
    """`greenbench list suites|workloads|settings`."""
    if what == "suites":
        from greenbench.spec import available_suites, load_suite

        table = Table("suite", "description", "from")
        for name in available_suites():
            table.add_row(cell(name), cell(load_suite(name).description), "shipped with greenbench")
        console.print(table)
        console.print("Your own suite: greenbench run --suite PATH.toml (see README, Workloads).")
    elif what == "workloads":
        from greenbench.workloads import WORKLOADS

        table = Table("workload", "question", "sweeps", "from")
        for wl in WORKLOADS.values():
            sweeps = ", ".join(f"{k}={v}" for k, v in wl.sweep.items())
            table.add_row(cell(wl.name), cell(wl.question), cell(sweeps), "greenbench")
        for row in registered_workloads():
            table.add_row(*(cell(c) for c in row))
        console.print(table)
        console.print(
            "Your own: greenbench run --workload module.path:attribute (docs/user-workloads.md)."
        )
    elif what == "settings":
        from greenbench.spec import DEFAULTS

        table = Table("setting", "default")
        for key, value in DEFAULTS.items():
            table.add_row(cell(key), cell(repr(value)))
        console.print(table)


def registered_workloads() -> list[tuple[str, str, str, str]]:
    """(name, question, sweeps, from) of every workload installed packages register under the
    ``greenbench.workloads`` entry-point group; one that does not load says why instead of its
    question (the listing goes on)."""
    from greenbench.errors import GreenbenchError
    from greenbench.user import entry
    from greenbench.workloads import from_user

    rows = []
    for name, ep in sorted(entry.registered().items()):
        where = f"{ep.value}" + (f" ({ep.dist.name} {ep.dist.version})" if ep.dist else "")
        try:
            wl = from_user(entry.load(name))
        except GreenbenchError as exc:
            rows.append((name, f"cannot load: {exc}", "", where))
            continue
        sweeps = ", ".join(f"{k}={v}" for k, v in wl.sweep.items())
        rows.append((name, wl.question, sweeps, where))
    return rows


def doctor() -> None:
    """`greenbench doctor`: devices, energy sources and why each is or is not usable."""
    from greenbench.energy.select import (
        cuda_device_names,
        describe_cuda,
        doctor_report,
        explain_choices,
    )

    names = cuda_device_names()
    probes = doctor_report()
    console.print(f"[bold]devices[/bold]: {cell(describe_cuda(names))}")
    table = Table("energy source", "available", "why")
    for p in probes:
        available = "[green]yes[/green]" if p.available else "[red]no[/red]"
        table.add_row(cell(p.source), available, cell(p.reason))
    console.print(table)
    for line in explain_choices(probes, names).values():
        console.print(cell(line))
