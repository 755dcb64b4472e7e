"""What the CLI prints about greenbench itself and this machine: the suites, workloads and
settings it offers (`greenbench list suites|workloads|settings`), what its registries hold
(`greenbench list strategies|model-families|energy-sources|report-sections`, a line each) and
what the machine can measure (`greenbench doctor`). These views read the spec and the
registries and probe meters (which import torch), so they stand at the CLI's level, above the
torch-free views of stored results in `reporting`.
"""

from __future__ import annotations

from rich.table import Column, Table

from greenbench.reporting.terminal import cell, console


def catalog(what: str) -> None:
    """`greenbench list suites|workloads|settings`."""
    if what == "suites":
        from greenbench.suite import available_suites, load_suite

        # where each suite is read from: the installed package's folder of shipped suites
        table = Table("suite", "description", Column("from", overflow="fold"))
        for name in available_suites():
            suite = load_suite(name)
            table.add_row(cell(name), cell(suite.description), cell(suite.source))
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
    from greenbench.workload import from_user

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
    node offers beyond them, the GPUs' power limits, and the balancing cost models fitted on
    this machine. Reads only; changes nothing."""
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
    cost_fits()


def cost_fits() -> None:
    """The stored fits of ``data.cost_model = measured`` (`greenbench.data.cost_fit`)."""
    from greenbench.data.cost_fit import CACHE_NAME, stored_fits

    fits = stored_fits()
    if not fits:
        console.print(
            f"[bold]balancing cost fits[/bold]: none stored ({CACHE_NAME}; a run with "
            "data.cost_model=measured measures one)"
        )
        return
    table = Table(
        "model", "precision", "threads", "cpu", "a (s)", "b (s)", "quadratic share",
        "worst error", "lengths", "taken", title="balancing cost fits: a·s² + b·s, s = tokens/32k",
    )  # fmt: skip
    for f in fits:
        k = f.key
        table.add_row(
            cell(f"{k.family}/{k.size}"), k.precision, str(k.threads),
            cell(f"{k.cpu_model} ×{k.logical_cores}, torch {k.torch}"), f"{f.a:.4g}",
            f"{f.b:.4g}", f"{f.quadratic_share:.2f}", f"{f.worst_error:.2f}",
            f"{min(f.tokens, default=0)}–{max(f.tokens, default=0)}", f.taken,
        )  # fmt: skip
    console.print(table)


def node_and_limits(redfish_url: str = "") -> None:
    """The doctor's second half: the node's own meters (IPMI DCMI, Redfish) and every GPU's power
    limits (now, default, allowed) with whether greenbench may change them."""
    from greenbench.energy.node import doctor_probes
    from greenbench.launcher.power_limits import doctor_report

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


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph as one line ("" without one)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def list_strategies() -> None:
    """Every registered strategy (`greenbench.strategies.STRATEGIES`), by its card's one-line
    doc (no strategy's torch implementation is imported)."""
    from greenbench.strategies import STRATEGIES

    table = Table("strategy", "what it is")
    for name, card in STRATEGIES.items():
        table.add_row(cell(name), cell(card.doc))
    console.print(table)
    console.print("Pick one with --set strategy=NAME (docs/architecture.md: adding one).")


def list_model_families() -> None:
    """Every registered model family (`greenbench.models.FAMILIES`), by its package's doc, with
    its size presets."""
    import importlib

    from greenbench.models import FAMILIES

    table = Table("model family", "sizes", "what it is")
    for name, family in FAMILIES.items():
        package = importlib.import_module(family.describe.__module__.rpartition(".")[0])
        sizes = ", ".join(family.presets)
        table.add_row(cell(name), cell(sizes), cell(first_paragraph(package.__doc__)))
    console.print(table)
    console.print("Pick one with --set model.family=NAME --set model.size=SIZE.")


def list_energy_sources() -> None:
    """Every energy source a run can name (`greenbench.energy.sources.ENERGY_SOURCES`): the kind
    of figure it gives and whether it works here (`greenbench doctor` says more)."""
    from greenbench.energy.sources import ENERGY_SOURCES

    table = Table("energy source", "figure", "available here", "what it reads")
    for name, source in ENERGY_SOURCES.items():
        available = "[green]yes[/green]" if source.probe().available else "[red]no[/red]"
        table.add_row(cell(name), cell(source.figure), available, cell(source.doc))
    console.print(table)
    console.print("auto picks the best available; force one with --energy-source NAME.")


def list_report_sections() -> None:
    """The sections of `greenbench report` in the order it writes them
    (`greenbench.reporting.sections.REPORT_SECTIONS`)."""
    from greenbench.reporting.sections import REPORT_SECTIONS

    table = Table("report section", "what it shows")
    for section in REPORT_SECTIONS:
        table.add_row(cell(section.name), cell(section.doc))
    console.print(table)


#: `greenbench list WHAT` over one of greenbench's registries (the CLI's ``REGISTRY_LISTS``)
REGISTRY_VIEWS = {
    "strategies": list_strategies,
    "model-families": list_model_families,
    "energy-sources": list_energy_sources,
    "report-sections": list_report_sections,
}


def registry_listing(what: str) -> None:
    """`greenbench list strategies|model-families|energy-sources|report-sections`."""
    REGISTRY_VIEWS[what]()
