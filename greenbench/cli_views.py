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
        from greenbench.settings import SCHEMA

        table = Table("setting", "default", "choices", "what it sets")
        for key, default, choices, doc in SCHEMA.rows():
            table.add_row(cell(key), cell(repr(default)), cell(choices), cell(doc))
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


def doctor(redfish_url: str = "") -> None:
    """`greenbench doctor`: devices, energy sources and why each is or is not usable, what the
    node offers beyond them, and the GPUs' power limits. Reads only; changes nothing."""
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
    node_and_limits(redfish_url)


def node_and_limits(redfish_url: str = "") -> None:
    """The doctor's second half: the node's own meters (IPMI DCMI, Redfish) and every GPU's power
    limits (now, default, allowed) with whether greenbench may change them."""
    from greenbench.energy.node import doctor_probes
    from greenbench.running.power_limits import doctor_report

    table = Table("node meter", "available", "why")
    for p in doctor_probes(redfish_url):
        available = "[green]yes[/green]" if p.available else "[red]no[/red]"
        table.add_row(cell(p.source), available, cell(p.reason))
    console.print(table)
    report = doctor_report()
    if not report.devices:
        console.print(f"[bold]GPU power limits[/bold]: {cell(report.why or 'no GPU')}")
    else:
        table = Table("GPU", "name", "limit now W", "default W", "allowed W", "uuid")
        for d in report.devices:
            table.add_row(
                cell(d.index), cell(d.name), f"{d.current_w:g}", f"{d.default_w:g}",
                f"{d.min_w:g}–{d.max_w:g}", cell(d.uuid),
            )  # fmt: skip
        console.print(table)
        may = report.permission
        verdict = "[green]may[/green]" if may and may.may else "[red]may not[/red]"
        console.print(f"greenbench {verdict} change them: {cell(may.why if may else report.why)}")
    for entry in report.held:
        console.print(
            f"GPU {cell(entry.get('index'))} ({cell(entry.get('uuid'))}) is held at "
            f"{cell(entry.get('applied_w'))} W by greenbench process {cell(entry.get('pid'))}, "
            f"running now (original {cell(entry.get('original_w'))} W, restored when it ends)"
        )
