"""The `greenbench` command: parses options, calls one library function, renders the answer.

Errors greenbench raises on purpose (GreenbenchError) become one line on stderr and their exit
code (2 for bad input), and so do click's usage errors (an unknown option, a bad value, a
missing argument: ``UsageLine``, exit 2); nothing else is caught here. ``--help`` shows the
whole usage.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import click

from greenbench.energy.settings import IDLE_MAX_AGE_S
from greenbench.energy.sources import SOURCE_CHOICES
from greenbench.errors import GreenbenchError

DB_HELP = "DuckDB results file (default: $GREENBENCH_DB or ./greenbench.duckdb)"


def default_db() -> Path:
    return Path(os.environ.get("GREENBENCH_DB", "greenbench.duckdb"))


def friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn GreenbenchError into one clear line and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GreenbenchError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


class UsageLine(click.UsageError):
    """A usage error (an unknown option or command, a bad value, a missing argument) said in
    the one line every greenbench refusal takes, exit 2, instead of click's usage block."""

    def __init__(self, error: click.UsageError, command_path: str) -> None:
        super().__init__(usage_line(error, command_path), error.ctx)

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.message}", file=file, err=True)


def usage_line(error: click.UsageError, command_path: str) -> str:
    """Click's message on one line, begun in lower case as greenbench's own, with where the
    whole usage is: ``invalid value for '--nodes': 0 is not in the range x>=1 (see
    'greenbench run --help')``."""
    text = " ".join(error.format_message().split()).rstrip(".")
    if text[:1].isupper() and text[1:2].islower():
        text = text[0].lower() + text[1:]
    path = error.ctx.command_path if error.ctx is not None else command_path
    return f"{text} (see '{path} --help')"


#: the bare ``greenbench``: click (8.2 on) shows the help as a usage error, left as it is
_SHOWS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", UsageLine)


@contextlib.contextmanager
def one_line_usage(command_path: str) -> Iterator[None]:
    """Click's usage errors inside the block, about the command at ``command_path``, become
    ``UsageLine``s (the bare ``greenbench``, which shows the help, stays as it is)."""
    try:
        yield
    except (UsageLine, _SHOWS_HELP):
        raise
    except click.UsageError as error:
        raise UsageLine(error, command_path) from None


def _path(info_name: str | None, parent: click.Context | None) -> str:
    name = info_name or "greenbench"
    return f"{parent.command_path} {name}" if parent is not None else name


class Command(click.Command):
    """A greenbench command: its usage errors in one line (``UsageLine``)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with one_line_usage(_path(info_name, parent)):
            return super().make_context(info_name, args, parent=parent, **extra)


class Greenbench(Command, click.Group):
    """The command group: its own usage errors (``Command.make_context``), an unknown
    command's, and every command's, in one line."""

    command_class = Command

    def invoke(self, ctx: click.Context) -> Any:
        with one_line_usage(ctx.command_path):
            return super().invoke(ctx)


@click.group(cls=Greenbench)
@click.version_option(package_name="greenbench")
def main() -> None:
    """Energy-aware benchmarks of LLM training: joules, tokens/s and MFU per configuration."""
    restore_power_limits()


def restore_power_limits() -> None:
    """Before any command: put back the GPU power limits a greenbench killed mid-run (SIGKILL)
    left changed, one line each on stderr (`greenbench.launcher.power_limits`). Without a
    journal (its file exists only while it holds an entry) there is nothing to restore, and
    nothing of the launcher is imported: ``greenbench measure`` starts its command at once."""
    from greenbench.hardware.machine import power_limit_journal

    if not power_limit_journal().exists():
        return
    from greenbench.launcher.power_limits import restore_stale

    for line in restore_stale():
        click.echo(f"greenbench: {line}", err=True)


@main.command()
@click.option("--suite", help="a shipped suite (`greenbench list suites`) or your own .toml file")
@click.option("--workload", help="run one workload (see `greenbench list workloads`)")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="override a setting; a,b,c sweeps it (see `greenbench list settings`)",
)
@click.option("--repeats", type=click.IntRange(min=1), help="measured windows per configuration")
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="run every configuration with K seeds: its seed, seed+1, … seed+K-1 (views pool "
    "them over seeds, each seed's run one sample)",
)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), help="default: auto")
@click.option("--nproc", type=click.IntRange(min=1), help="ranks per node")
@click.option(
    "--energy-source",
    type=click.Choice(SOURCE_CHOICES),
    help="force an energy source (fails if unavailable)",
)
@click.option("--label", help="tag stored with every run, for `greenbench compare`")
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@click.option("--nnodes", type=click.IntRange(min=1), help="torchrun --nnodes (multi-node)")
@click.option("--node-rank", type=click.IntRange(min=0), help="torchrun --node-rank (multi-node)")
@click.option("--rdzv-endpoint", help="torchrun --rdzv-endpoint host:port (multi-node)")
@click.option(
    "--force",
    is_flag=True,
    help="run configurations the up-front check says cannot fit this machine's memory or time",
)
@click.option(
    "--resume",
    is_flag=True,
    help="skip configurations already stored ok with the same settings and label",
)
@click.option(
    "--devices",
    type=click.IntRange(min=1),
    help="devices this node lends a configuration (GPUs on cuda, default: all visible; ranks "
    "on cpu, default: no limit); configurations needing more are stored as skipped",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "slurm", "submitit-local"]),
    default="local",
    show_default=True,
    help="local: one configuration after another here; slurm: SLURM job arrays through "
    "submitit, each job writing result shards that are merged here; submitit-local: the same "
    "jobs as subprocesses of this machine (docs/cluster.md)",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="print the plan and run nothing, write nothing: every configuration, those skipped "
    "and why, an estimated time each and in total (with --executor slurm: the sbatch "
    "parameters too)",
)
@click.option(
    "--no-wait", is_flag=True, help="submit and return; `greenbench status` collects later"
)
@click.option(
    "--nodes", type=click.IntRange(min=1), help="fixed request: nodes per job (cluster executors)"
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=0),
    help="fixed request: GPUs per node per job (default: each job asks what it needs)",
)
@click.option("--partition", help="SLURM partition (cluster executors)")
@click.option("--account", help="SLURM account (cluster executors)")
@click.option(
    "--time-min", type=click.IntRange(min=1), help="minutes per configuration (default 60)"
)
@click.option("--per-job", type=click.IntRange(min=1), help="configurations per job (default 1)")
@click.option(
    "--cluster",
    "cluster_sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="any [cluster] key of a suite: qos, constraint, cpus_per_rank, mem_gb, exclusive, "
    "array_parallelism, setup, poll_s",
)
@friendly
def run(
    suite: str | None,
    workload: str | None,
    sets: tuple[str, ...],
    repeats: int | None,
    seeds: int,
    device: str | None,
    nproc: int | None,
    energy_source: str | None,
    label: str | None,
    db: Path | None,
    nnodes: int | None,
    node_rank: int | None,
    rdzv_endpoint: str | None,
    force: bool,
    resume: bool,
    devices: int | None,
    executor: str,
    dry_run: bool,
    no_wait: bool,
    nodes: int | None,
    gpus_per_node: int | None,
    partition: str | None,
    account: str | None,
    time_min: int | None,
    per_job: int | None,
    cluster_sets: tuple[str, ...],
) -> None:
    """Run a suite or one workload, measure it, and store the results.

    A configuration this machine cannot run (more devices than it has, or more memory or time
    than the up-front estimate allows) is stored as skipped with its reason and the others
    run; the exit status is 0 unless a configuration that ran failed (1), and 2 when nothing
    can run here. With a cluster executor, each configuration is a job (docs/cluster.md)."""
    from greenbench.config import setting_of
    from greenbench.settings import EnergySettings
    from greenbench.settings.written import parse_assignment
    from greenbench.spec import SpecError, expand, expand_suite, with_seeds
    from greenbench.suite import load_suite

    if bool(suite) == bool(workload):
        raise SpecError("give exactly one of --suite NAME or --workload NAME")
    cluster_cli = {
        "nodes": nodes, "gpus_per_node": gpus_per_node, "partition": partition,
        "account": account, "time_min": time_min, "per_job": per_job,
    }  # fmt: skip
    on_cluster = executor != "local"
    if not on_cluster:
        given = [f"--{k.replace('_', '-')}" for k, v in cluster_cli.items() if v is not None]
        given += ["--cluster"] * bool(cluster_sets) + ["--no-wait"] * no_wait
        if given:
            raise SpecError(f"{given[0]} goes with a cluster executor (--executor slurm)")
    elif node_rank is not None or rdzv_endpoint:
        raise SpecError(
            "--node-rank and --rdzv-endpoint are for nodes started by hand; with --executor "
            f"{executor} the job's allocation gives them"
        )
    cli: dict[str, Any] = dict(parse_assignment(a) for a in sets)
    for key, value in (
        ("repeats", repeats),
        ("device", device),
        ("nproc", nproc),
        (setting_of(EnergySettings, "source").key, energy_source),
        ("nnodes", nnodes),
    ):
        if value is not None:
            cli[key] = value
    # on SLURM, `auto` means the nodes' GPUs (say --device cpu for CPU nodes)
    machine = "cuda" if executor == "slurm" else None
    suite_spec = load_suite(suite) if suite else None
    if suite_spec is not None:
        specs = expand_suite(suite_spec, cli, label=label, machine_device=machine)
    else:
        specs = expand(workload, [cli], label=label)
    specs = with_seeds(specs, seeds)
    if on_cluster:
        from greenbench.cluster.command import run_on_cluster
        from greenbench.cluster.options import cluster_options, parse_cluster_assignment

        options = cluster_options(
            suite_spec.cluster if suite_spec else {},
            cluster_cli | dict(parse_cluster_assignment(a) for a in cluster_sets),
        )
        code = run_on_cluster(
            specs, db or default_db(), executor=executor, options=options,
            python_path=list(suite_spec.python_path) if suite_spec else [], resume=resume,
            force=force, devices=devices, dry_run=dry_run, wait=not no_wait,
        )  # fmt: skip
        if dry_run:
            from greenbench.cluster.preview import print_cluster_plan

            print_cluster_plan(specs, db or default_db(), options, resume=resume)
        sys.exit(code)
    spans = max(spec["nnodes"] for spec in specs)  # --nnodes, or nnodes from --set or a suite
    if spans > 1 and not rdzv_endpoint:
        raise SpecError(
            f"nnodes={spans}: --nnodes > 1 needs --rdzv-endpoint HOST:PORT (torchrun's "
            "rendezvous), or a cluster executor (--executor slurm)"
        )
    if (node_rank is None) != (rdzv_endpoint is None):
        raise SpecError(
            "multi-node runs need both --node-rank N and --rdzv-endpoint HOST:PORT "
            "(under SLURM: --node-rank $SLURM_NODEID)"
        )
    if node_rank is not None and node_rank >= spans:
        raise SpecError(f"--node-rank {node_rank} is not below --nnodes {spans}")
    if rdzv_endpoint and not re.fullmatch(r"[^\s:]+:\d+|\[[0-9a-fA-F:]+\]:\d+", rdzv_endpoint):
        raise SpecError(f"--rdzv-endpoint must be HOST:PORT, got {rdzv_endpoint!r}")
    if dry_run:
        from greenbench.launcher.plan_preview import local_plan, print_plan

        print_plan(local_plan(specs, db or default_db(), resume=resume, force=force,
                              devices=devices))  # fmt: skip
        return
    from greenbench.launcher.progress import run_with_progress

    rdzv = {"endpoint": rdzv_endpoint, "node_rank": node_rank} if rdzv_endpoint else None
    summary = run_with_progress(
        specs, db or default_db(), rdzv=rdzv, resume=resume, force=force, devices=devices
    )
    if summary.failed:
        sys.exit(1)


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--tokens", type=click.IntRange(min=0), help="tokens the command trains on")
@click.option(
    "--tokens-file",
    type=click.Path(path_type=Path),
    help="file the command writes its token count to (default: a temporary one, whose path "
    "the command finds in $GREENBENCH_TOKENS_FILE)",
)
@click.option("--name", help="what is measured (default: the command's name)")
@click.option("--label", help="tag stored with the run, for `greenbench compare`")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto")
@click.option(
    "--energy-source",
    type=click.Choice(SOURCE_CHOICES),
    default="auto",
    help="force an energy source (fails if unavailable)",
)
@click.option("--region", default="world", help="carbon-intensity region (ISO-3 or cloud)")
@click.option("--idle-s", type=click.FloatRange(min=0), default=0.0, help="idle power first")
@click.option(
    "--idle-max-age-s",
    type=click.FloatRange(min=0),
    default=IDLE_MAX_AGE_S,
    show_default=True,
    help="reuse an idle baseline taken quiet this recently (0: sample anew)",
)
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@friendly
def measure(
    command: tuple[str, ...],
    tokens: int | None,
    tokens_file: Path | None,
    name: str | None,
    label: str | None,
    device: str,
    energy_source: str,
    region: str,
    idle_s: float,
    idle_max_age_s: float,
    db: Path | None,
) -> None:
    """Measure a whole command's energy: greenbench measure [OPTIONS] -- COMMAND [ARGS]...

    Stored as a whole-process measurement (start-up and everything else included), not a
    training window; exits with the command's status."""
    from greenbench.measuring.command import measure_command

    result = measure_command(
        list(command), db=db or default_db(), label=label, name=name, tokens=tokens,
        tokens_file=tokens_file, device=device, energy_source=energy_source, region=region,
        idle_s=idle_s, idle_max_age_s=idle_max_age_s,
    )  # fmt: skip
    click.echo(result.line(), err=True)
    sys.exit(result.exit_code)


#: `greenbench list` over greenbench's registries (`cli_views.registry_listing`)
REGISTRY_LISTS = ("strategies", "model-families", "energy-sources", "report-sections")


@main.command(name="list")
@click.argument(
    "what", type=click.Choice(["suites", "workloads", "runs", "settings", *REGISTRY_LISTS])
)
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@click.option("--limit", type=click.IntRange(min=1), default=30, show_default=True)
@friendly
def list_(what: str, db: Path | None, limit: int) -> None:
    """List suites, workloads, stored runs, every setting with its default, or what greenbench
    offers: strategies, model families, energy sources and report sections (one line each)."""
    if what == "runs":
        from greenbench.reporting.terminal import runs_table

        runs_table(db or default_db(), limit)
        return
    if what in REGISTRY_LISTS:
        from greenbench.cli_views import registry_listing

        registry_listing(what)
        return
    from greenbench.cli_views import catalog

    catalog(what)


@main.command()
@click.argument("run_id")
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@click.option(
    "--all", "all_settings", is_flag=True, help="print every setting, not only those changed"
)
@friendly
def show(run_id: str, db: Path | None, all_settings: bool) -> None:
    """Show one run: its configuration (the settings that differ from the defaults; every one
    with --all), every repeat and every rank."""
    from greenbench.reporting import terminal as render

    render.run_detail(db or default_db(), run_id, all_settings=all_settings)


@main.command()
@friendly
@click.option(
    "--redfish-url", default="", help="also read this Redfish Power or EnvironmentMetrics resource"
)
def doctor(redfish_url: str) -> None:
    """What this machine can measure (CUDA, NVML, RAPL, Zeus, the node's BMC), the GPUs' power
    limits and whether greenbench may change them, and why not. Changes nothing."""
    from greenbench.cli_views import doctor as show_doctor

    show_doctor(redfish_url)


@main.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "json", "parquet", "codecarbon", "bmf"]),
    default="csv",
    show_default=True,
    help="codecarbon: CodeCarbon's emissions.csv, a row per run; bmf: Bencher Metric Format JSON",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="output file, or a folder to write into (default: results.FMT, emissions.csv, bmf.json)",
)
@click.option("--force", is_flag=True, help="overwrite an existing output file")
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@friendly
def export(fmt: str, out: Path | None, force: bool, db: Path | None) -> None:
    """Export runs joined with their per-repeat results, or in another tool's format.

    csv, json, parquet: a row per repeat. codecarbon: CodeCarbon's emissions.csv columns, a
    row per ok run (energy in kWh, power in W, emissions in kg CO2eq; what greenbench does not
    know left empty). bmf: Bencher Metric Format, a benchmark per leaderboard row, its medians
    with their 95 % CI where the repeats allow one.

    An existing file is overwritten only with --force; devices and pipes are refused. The file
    is written under a temporary name beside it and renamed when complete, so a failure leaves
    nothing half-written. A path outside the current directory is allowed; the line printed
    names the absolute place written.
    """
    from greenbench.outputs import where
    from greenbench.reporting.interchange import DEFAULT_NAMES
    from greenbench.reporting.interchange import export as do_export

    for path in do_export(db or default_db(), fmt, out or Path(DEFAULT_NAMES[fmt]), force=force):
        click.echo(f"wrote {where(path)}")


@main.command("import")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@friendly
def import_(source: Path, db: Path | None) -> None:
    """Bring another machine's runs (its results database SOURCE) into this database.

    Idempotent by run id, in one transaction: a run this database lacks is added; one it holds
    is replaced only by a copy at least as finished that keeps every result row (the rule of
    `greenbench merge`), otherwise refused and kept as it is; the same run twice is unchanged.
    Each run keeps its machine's fingerprint (host, hardware, versions). SOURCE is only read
    (an older schema is migrated in a temporary copy); a file that is not a greenbench
    results database, a newer or a damaged one is refused whole, exit 2.
    """
    from greenbench.store import import_database

    report = import_database(db or default_db(), source)
    lines = report.lines()
    for i, line in enumerate(lines):
        click.echo(line, err=i > 0)


@main.command()
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@friendly
def merge(db: Path | None) -> None:
    """Fold result shards (DB.shards/*.duckdb) into the database; exit 1 if one is left.

    A run goes to a shard when another process held the database past GREENBENCH_LOCK_WAIT_S
    seconds as it finished, or when a cluster job ran it. Each shard is merged in one
    transaction and then deleted; merging again adds nothing; a damaged or newer-schema shard,
    or one that would take a stored run back to a less finished status or drop its results,
    is reported and left in place.
    """
    from greenbench.store import merge_shards, shard_dir

    path = db or default_db()
    report = merge_shards(path)
    if not report.merged and not report.left:
        click.echo(f"no shards to merge in {shard_dir(path)}")
    lines = report.lines()  # the merged shards first, then those left (on stderr)
    for i, line in enumerate(lines):
        click.echo(line, err=i >= len(report.merged))
    if report.left:
        sys.exit(1)


@main.command()
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@click.option("--wait", is_flag=True, help="wait until every job has ended (progress bar)")
@click.option(
    "--poll-s", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
    help="seconds between looks at the jobs with --wait",
)  # fmt: skip
@friendly
def status(db: Path | None, wait: bool, poll_s: float) -> None:
    """Cluster submissions of the database: collect the jobs that ended (their shards merged,
    what a dead job owed stored failed or interrupted with the scheduler's reason) and show
    every submission's jobs and configurations. Exit 0 when no job is open, 3 while some are."""
    from rich.console import Console

    from greenbench.cluster.watch import status as show_status

    if show_status(db or default_db(), wait=wait, poll_s=poll_s, console=Console(soft_wrap=True)):
        sys.exit(3)


@main.command()
@click.option("--baseline", required=True, help="run id, git sha, label, or exported results file")
@click.option("--candidate", required=True, help="run id, git sha, label, or exported results file")
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    help="metric to judge (repeatable; default joules_per_token)",
)
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    help="practical effect δ, e.g. 5% or metric=3% or workload:metric=2% (repeatable)",
)
@click.option(
    "--alpha",
    type=float,
    default=0.01,
    show_default=True,
    help="significance level (Holm-corrected over the call)",
)
@click.option("--strict", is_flag=True, help="exit 4 when a comparison is inconclusive or unstable")
@click.option(
    "--allow-contended",
    is_flag=True,
    help="judge runs stored contended (the machine was shared) instead of calling them "
    "inconclusive",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown", "json"]),
    default="table",
    show_default=True,
)
@click.option(
    "--history", is_flag=True, help="judge the candidate against the baseline's last ≤ 64 results"
)
@click.option(
    "--by",
    type=click.Choice(["commit", "branch", "label", "date"]),
    help="with --history: what one history result is, the runs of one commit, branch, label or "
    "day (default: commit where every run has a git sha, else date)",
)
@click.option("--branch", help="with --history: only the history runs started on this git branch")
@click.option("--label", help="with --history: only the history runs of this --label")
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
def compare(
    baseline: str,
    candidate: str,
    metrics: tuple[str, ...],
    thresholds: tuple[str, ...],
    alpha: float,
    strict: bool,
    allow_contended: bool,
    fmt: str,
    history: bool,
    by: str | None,
    branch: str | None,
    label: str | None,
    db: Path | None,
) -> None:
    """Did the candidate regress against the baseline? Exit 0 ok, 3 regression, 4 inconclusive.

    A comparison with a run that shared the machine (stored contended) is inconclusive, never a
    regression or an improvement, unless --allow-contended."""
    from greenbench.compare import compare_cli

    sys.exit(
        compare_cli(
            db or default_db(),
            baseline,
            candidate,
            list(metrics) or None,
            list(thresholds) or None,
            alpha,
            strict,
            fmt,
            history,
            allow_contended=allow_contended,
            by=by,
            branch=branch,
            label=label,
        )
    )


@main.command()
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="folder to write, e.g. reports/NAME",
)
@click.option("--force", is_flag=True, help="replace an existing, non-empty report folder")
@click.option("--title", default="greenbench report", show_default=True)
@click.option("--ref", help="limit to a run id, git sha or label")
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@friendly
def report(out: Path, force: bool, title: str, ref: str | None, db: Path | None) -> None:
    """Write a Markdown report with PNG plots (leaderboard, Pareto front, workloads).

    A non-empty --out folder is replaced only with --force (a folder holding only an earlier
    report is replaced whole; elsewhere only the report's files are). The report is built in a
    temporary folder beside --out and moved into place when complete, so a failure leaves
    nothing half-written. A path outside the current directory is allowed; the line printed
    names the absolute place written.
    """
    from greenbench.outputs import where
    from greenbench.reporting.report import write_report

    path = write_report(db or default_db(), out, title=title, ref=ref, force=force)
    click.echo(f"wrote {where(path)}")


@main.command()
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="folder to write the site into, e.g. site/",
)
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@click.option("--force", is_flag=True, help="replace an earlier site in --out, whole")
@click.option("--title", default="greenbench results", show_default=True)
@friendly
def publish(out: Path, db: Path | None, force: bool, title: str) -> None:
    """Write a static web site of the results: leaderboard, Pareto fronts, workloads, history.

    Interactive charts (Vega-Lite) with their JavaScript in the site itself: open index.html
    from disk, no server and no network needed. A non-empty --out is replaced only with
    --force, and only when it holds an earlier site. The site is built in a temporary folder
    beside --out and moved into place when complete.
    """
    from greenbench.outputs import where
    from greenbench.reporting.site import publish as publish_site

    site = publish_site(db or default_db(), out, title=title, force=force)
    click.echo(
        f"wrote {where(site.index)}: {site.pages} pages, {site.size_bytes / 1e6:.1f} MB "
        "(open it in a browser: no server needed)"
    )


class Checked(click.ParamType):
    """A typed option value read by one of greenbench's checks (``check(option, text)``), whose
    refusal becomes click's one-line usage error, without the option named twice."""

    def __init__(self, name: str, check: Callable[[str, str], Any]) -> None:
        self.name = name
        self.check = check

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        option = param.opts[0] if param is not None else ""
        try:
            return self.check(option, value)
        except GreenbenchError as exc:
            self.fail(str(exc).removeprefix(f"{option} "), param, ctx)


def _whole(least: int = 1, most: str | None = None) -> Checked:
    """A whole number >= ``least`` and at most the planner's limit named ``most``, read when
    the option is (the planner is not imported for other commands)."""

    def check(option: str, text: str) -> int:
        from greenbench.planner import command, search

        return command.whole(option, text, least, getattr(search, most) if most else None)

    return Checked("integer", check)


def _watts(option: str, text: str) -> float | None:
    from greenbench.planner.command import watts

    return watts(text)


def _plan_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`plan`'s options, typed (the limits are the planner's)."""
    options = [
        click.option("--model-family", "family", required=True, help="transformer or mamba"),
        click.option("--size", required=True, help="model preset, e.g. 7b"),
        click.option(
            "--devices",
            type=_whole(most="MAX_DEVICES"),
            required=True,
            help="number of devices to plan for (GPUs, or ranks of the host)",
        ),
        click.option(
            "--device-type",
            required=True,
            help="h100, a100, h200, b200, … (the GPU table), or host: this host's CPU as its "
            "runs stored in --db show it",
        ),
        click.option(
            "--seq-len",
            type=_whole(most="MAX_SEQ_LEN"),
            default=4096,
            show_default=True,
            help="tokens per sequence",
        ),
        click.option(
            "--global-batch",
            type=_whole(most="MAX_GLOBAL_BATCH"),
            default=512,
            show_default=True,
            help="sequences per optimizer step",
        ),
        click.option(
            "--micro-batch",
            type=_whole(most="MAX_GLOBAL_BATCH"),
            default=1,
            show_default=True,
            help="sequences per microbatch and rank",
        ),
        click.option(
            "--precision",
            type=click.Choice(["bf16", "fp32"]),
            default="bf16",
            show_default=True,
        ),
        click.option(
            "--power-limit-w",
            type=Checked("watts", _watts),
            default=None,
            help="GPU power limit in watts (default: none)",
        ),
        click.option(
            "--rank-by",
            type=click.Choice(["energy", "time", "memory"]),
            default="energy",
            show_default=True,
            help="what the table is ranked by",
        ),
        click.option(
            "--top",
            type=_whole(least=0),
            default=20,
            show_default=True,
            help="rows shown besides the Pareto set (0: every layout)",
        ),
        click.option(
            "--db",
            type=click.Path(path_type=Path),
            help="results database: show layouts measured on this host with the prediction's error",
        ),
        click.option(
            "--calibrate",
            is_flag=True,
            help="fit α, β, sustained FLOP/s, per-family rates and power from stored runs",
        ),
        click.option(
            "--run-top",
            type=_whole(),
            default=None,
            metavar="K",
            help="run the planner's first K runnable layouts here, store them in --db and "
            "report the regret of its first pick",
        ),
        click.option(
            "--set",
            "run_sets",
            multiple=True,
            metavar="KEY=VALUE",
            help="with --run-top: a setting of those runs (e.g. repeats=1)",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@main.command()
@_plan_options
@friendly
def plan(**options: Any) -> None:
    """Predict step time, memory per device and J/token of every layout (no torch, no GPU)."""
    from greenbench.errors import SpecError
    from greenbench.planner.command import plan_command

    if (options["calibrate"] or options["run_top"] is not None) and options["db"] is None:
        options["db"] = default_db()
    if options["run_top"] is None:
        if options.pop("run_sets"):
            raise SpecError("--set goes with --run-top (the settings of the runs it starts)")
        del options["run_top"]
        plan_command(**options)
        return
    from greenbench.launcher.run_top import plan_and_run_top

    plan_and_run_top(**options)


@main.command()
@click.option("--db", type=click.Path(path_type=Path), help=DB_HELP)
@click.option(
    "--port", type=click.IntRange(1, 65535), help="port to serve on (default: a free one)"
)
@click.option("--address", default="127.0.0.1", show_default=True, help="address to bind")
@friendly
def dashboard(db: Path | None, port: int | None, address: str) -> None:
    """Serve the Streamlit leaderboard over the results database (read-only)."""
    from greenbench.dashboard_app.serve import serve

    sys.exit(serve(db or default_db(), port, address=address))


if __name__ == "__main__":
    main()
