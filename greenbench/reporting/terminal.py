"""Terminal rendering of stored runs for `greenbench list runs` and `greenbench show` (rich).

Everything printed here that came from a user, a database or an exception (labels, errors,
configuration names, settings, paths, ...) goes through ``cell`` / ``_fmt``, which escape rich
markup: a label ``[/bold] x`` or an error ``[red]x[/red]`` is shown literally and never breaks or
restyles the output. NULL columns (None, NaN, pandas' NA) of unfinished or failed runs print as
"—" instead of reaching rich as floats.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from greenbench.vocabulary import (
    EMULATED_SOURCE,
    WHOLE_PROCESS_STRATEGY,
    energy_label,
    is_simulated,
)
from greenbench.vocabulary.flops import CAUSAL, PALM, mfu_header
from greenbench.vocabulary.trust import Trust

MISSING = "—"


class _Stdout:
    """A rich console bound to the current stdout at each print: a terminal gets its own width,
    a pipe or file gets wide lines so nothing is cut to an ellipsis."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        import sys

        width = None if sys.stdout.isatty() else 200
        Console(width=width).print(*objects, **kwargs)


console = _Stdout()


def _missing(value: Any) -> bool:
    """None, NaN or pandas' NA: what a NULL column becomes in a query's rows."""
    if value is None or value is pd.NA:
        return True
    try:
        return bool(value != value)  # NaN
    except (TypeError, ValueError):
        return False


def cell(value: Any) -> str:
    """A value as a markup-safe cell; a missing one as "—"."""
    return MISSING if _missing(value) else escape(str(value))


def _fmt(value: Any, spec: str = ".4g") -> str:
    """A number formatted by ``spec``, markup-safe; a missing one as "—"."""
    if _missing(value):
        return MISSING
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return escape(str(value))


def runs_table(db_path: Path, limit: int) -> None:
    """`greenbench list runs`: the newest runs, any status, with the label and git branch each
    was run under (— where unknown)."""
    from greenbench.store import list_runs

    runs = list_runs(db_path, limit=limit)
    if runs.empty:
        console.print(f"no runs in {cell(db_path)} yet: `greenbench run --suite smoke`")
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
        "trust",
        "label",
        "branch",
        "started",
    )
    for r in runs.itertuples():
        # unfinished and failed runs have NULL energy columns: NaN or NA here, not None
        source = MISSING if _missing(r.energy_source) else str(r.energy_source)
        estimated = not _missing(r.energy_measured) and not bool(r.energy_measured)
        if estimated and "estimate" not in source:
            if is_simulated(source):
                source += " (emulated)" if EMULATED_SOURCE in source else " (simulated)"
            else:
                source += " (estimated)"
        table.add_row(
            cell(r.run_id),
            cell(r.status),
            cell(r.workload),
            cell(r.config_name),
            cell(r.layout),
            cell(r.n_repeats),
            _fmt(r.tokens_per_s_median, ",.0f"),
            ("≈ " if estimated else "") + _fmt(r.joules_per_token_median),
            escape(source),
            escape(Trust.of(r._asdict()).mark()) if r.status == "ok" else "",
            cell(r.label),
            cell(getattr(r, "git_branch", None)),  # a database older than branches has none
            cell(str(r.started_at)[:19] if not _missing(r.started_at) else None),
        )
    console.print(table)


def changed_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings whose value is not greenbench's default; a user workload's own (``user.*``)
    and any key greenbench no longer declares are always kept."""
    from greenbench.settings import SCHEMA

    defaults = SCHEMA.defaults()
    return {k: v for k, v in settings.items() if k not in defaults or defaults[k] != v}


def run_detail(db_path: Path, run_id: str, *, all_settings: bool = False) -> None:
    from greenbench.store import get_run

    run = get_run(db_path, run_id)
    console.print(
        f"[bold]{cell(run['run_id'])}[/bold]  {cell(run['workload'])}  "
        f"{cell(run['config_name'])}  status={cell(run['status'])}"
    )
    rank = cell(run.get("failed_rank"))
    if run.get("error"):
        console.print(f"[red]error[/red] (rank {rank}): {cell(run['error'])}")
    for warning in run.get("warnings") or []:
        console.print(f"[yellow]warning[/yellow]: {cell(warning)}")
    if run.get("error_tail"):
        console.print(f"last lines of rank {rank}'s output:")
        console.print(cell(run["error_tail"]), highlight=False)
    if run.get("log_path"):
        console.print(f"worker logs: {cell(run['log_path'])}")
    console.print(
        f"device {cell(run['device_type'])} ×{run['nproc'] * run['nnodes']} "
        f"{cell(run['precision'])}; label={cell(run.get('label'))} "
        f"git={cell(run.get('git_sha'))} branch={cell(run.get('git_branch'))}; "
        f"peak {_fmt(run.get('peak_flops'))} FLOP/s ({cell(run.get('peak_flops_source'))})"
    )
    if not _missing(run.get("power_limit_w")):
        note = f"; {run['power_limit_note']}" if run.get("power_limit_note") else ""
        console.print(
            f"GPU power limit {_fmt(run['power_limit_w'], 'g')} W (default "
            f"{_fmt(run.get('power_limit_default_w'), 'g')} W, set via "
            f"{cell(run.get('power_limit_via'))}; restored after the run){cell(note)}"
        )
    kernels = run.get("kernels") or {}
    quota = {True: "on", False: "off"}.get(run.get("rank_cpu_quota"), MISSING)
    console.print(
        f"layout {cell(run['layout'])} ({cell(run['strategy'])}); kernels "
        + (", ".join(f"{cell(k)}={cell(v)}" for k, v in sorted(kernels.items())) or MISSING)
        + f"; rank CPU quota {quota}"
    )
    config = run["config"] if isinstance(run["config"], dict) else json.loads(run["config"])
    settings = (config or {}).get("settings") or {}
    shown = settings if all_settings else changed_settings(settings)
    what = "settings" if all_settings else "settings changed from the defaults"
    console.print(
        f"{what}: "
        + (", ".join(f"{cell(k)}={cell(v)}" for k, v in shown.items()) or "none")
        + ("" if all_settings else f" ({len(settings)} in all: --all)")
    )
    results = run.get("results", [])
    if line := harness_line(run, results):
        console.print(line)
    if run.get("status") == "ok":
        trust_lines(run, results)
    if results:
        labels = sorted({energy_label(r["energy_source"], r["energy_measured"]) for r in results})
        est = "" if all(r["energy_measured"] for r in results) else " [yellow](estimate)[/yellow]"
        if any(EMULATED_SOURCE in str(r["energy_source"]) for r in results):
            console.print(
                "[yellow]emulated GPUs[/yellow]: CPU ranks stood in for GPUs; energy labelled "
                f"{', '.join(labels)}: the model's, never compared with a measurement"
            )
            est = " [yellow](emulated)[/yellow]"
        elif any(is_simulated(r["energy_source"]) for r in results):
            console.print(
                f"[yellow]simulated[/yellow]: no worker ran; energy {', '.join(labels)} at "
                "assumed watts, never compared with a measurement"
            )
            est = " [yellow](simulated)[/yellow]"
        table = Table(
            "repeat",
            "tokens",
            "seconds",
            "tokens/s",
            "J/token" + est,
            "net J/token",
            mfu_header(PALM),
            mfu_header(CAUSAL),
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
                _fmt(r.get("mfu_causal"), ".2%"),
                _fmt(
                    None if _missing(r["peak_mem_bytes"]) else r["peak_mem_bytes"] / 2**20, ",.0f"
                ),
                _fmt(r["step_time_p50_s"], ".3f"),
                _fmt(r["wait_fraction"], ".1%"),
                _fmt(r["co2_g"], ".3g"),
                cell("; ".join(filter(None, (r.get("energy_note"), r.get("idle_note"))))),
            )
        console.print(table)
        for r in results:  # why an MFU is unknown, or how its peak was re-measured
            if r.get("mfu_note"):
                console.print(f"MFU of repeat {r['repeat']}: {cell(r['mfu_note'])}")
        for r in results:  # a run whose microbatches skip stages: its figures on useful tokens
            if line := useful_line(r):
                console.print(f"repeat {r['repeat']}: {line}")
        for r in results:  # what was read beside the run's own devices
            if line := beside_line(r):
                console.print(f"repeat {r['repeat']}: {line}")
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
                cell(c["dim"]),
                cell(c["op"]),
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
                _fmt(None if read_elsewhere(r) else r["energy_j"], ".4g"),
            )
        console.print(table)


def useful_line(result: dict[str, Any]) -> str:
    """A repeat that ran part of the (token, block) work: its visited share, useful tokens/s
    and J per useful token beside the plain ones ("" where it ran all of it, or it is unknown)."""
    share = result.get("visited_share")
    if _missing(share) or share >= 1:
        return ""
    return (
        f"visited share {share:.3f} of the (token, block) work: useful tokens/s "
        f"{_fmt(result.get('useful_tokens_per_s'), ',.0f')} (tokens/s "
        f"{_fmt(result.get('tokens_per_s'), ',.0f')}), J per useful token "
        f"{_fmt(result.get('joules_per_useful_token'))} (J/token "
        f"{_fmt(result.get('joules_per_token'))}); useful FLOPs "
        f"{_fmt(result.get('useful_flops'), '.3g')}"
    )


def read_elsewhere(rank: dict[str, Any]) -> bool:
    """Whether a rank's energy window is a stand-in: its node's CPU is read by local rank 0,
    and its 0 J says nothing (shown empty, never as a zero)."""
    return rank.get("local_rank") != 0 and rank.get("energy_j") == 0


def trust_lines(run: dict[str, Any], results: list[dict[str, Any]]) -> None:
    """How far to trust an ok run (`greenbench.vocabulary.trust`): its markers, then every
    signal spelled out, one a line."""
    unreliable = [r for r in results if r.get("idle_note")]
    trust = Trust.of(
        run
        | {
            "energy_source": results[0]["energy_source"] if results else run["energy_source"],
            "energy_measured": results[0]["energy_measured"] if results else None,
            "idle_power_w": results[0].get("idle_power_w") if results else None,
            "idle_note": unreliable[0]["idle_note"] if unreliable else "",
        },
        n_repeats=len(results),
    )
    mark = trust.mark()
    console.print(f"trust: [yellow]{escape(mark)}[/yellow]" if mark else "trust: nothing lowers it")
    for signal in trust.signals():
        console.print(f"  {escape(signal)}")


def _seconds(value: Any) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def _age(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def harness_line(run: dict[str, Any], results: list[dict[str, Any]]) -> str:
    """What greenbench itself cost the run (``runs.harness_*``, `greenbench.results.HarnessCost`)
    in one markup-safe line: start-up before the first step (a whole process: before the
    command started) with its parts, and teardown after the last window; a reused idle
    baseline says so, with its age. "" for a run stored without them."""
    keys = ("harness_startup_s", "harness_ranks_s", "harness_calibration_s",
            "harness_baseline_s", "idle_baseline_age_s", "harness_teardown_s")  # fmt: skip
    cost = {k: None if _missing(run.get(k)) else float(run[k]) for k in keys}
    if all(v is None for v in cost.values()):
        return ""
    whole = run.get("strategy") == WHOLE_PROCESS_STRATEGY
    first = "the command started" if whole else "the first step"
    startup = cost["harness_startup_s"]
    head = f"{_seconds(startup)} before {first}" if startup is not None else f"{first}: unknown"
    parts = []
    if cost["harness_ranks_s"] is not None:
        parts.append(f"rank start-up {_seconds(cost['harness_ranks_s'])}")
    calibration = cost["harness_calibration_s"]
    if calibration is not None and not whole:
        parts.append(f"peak calibration {_seconds(calibration)}" if calibration > 0
                     else "peak calibration cached")  # fmt: skip
    age, sampled = cost["idle_baseline_age_s"], cost["harness_baseline_s"]
    watts = next((r.get("idle_power_w") for r in results if not _missing(r.get("idle_power_w"))),
                 None)  # fmt: skip
    at = f" {_fmt(watts, '.4g')} W" if watts is not None else ""
    if age is not None:
        parts.append(f"idle baseline{at} reused, taken quiet {_age(age)} before the run")
    elif sampled is not None:
        parts.append(f"idle baseline{at} sampled in {_seconds(sampled)}")
    line = f"harness: {head}" + (f" ({'; '.join(parts)})" if parts else "")
    if cost["harness_teardown_s"] is not None:
        after = "after it ended" if whole else "after the last window"
        line += f"; {_seconds(cost['harness_teardown_s'])} {after}"
    return escape(line)


def beside_line(r: dict[str, Any]) -> str:
    """A repeat's GPU power and what was read beside its devices (node meter, host CPU), as one
    markup-safe line; "" when there is none."""
    parts = []
    if not _missing(r.get("gpu_power_avg_w")):
        parts.append(
            f"GPU power mean {_fmt(r['gpu_power_avg_w'], '.0f')} W, peak "
            f"{_fmt(r.get('gpu_power_peak_w'), '.0f')} W"
        )
    if not _missing(r.get("energy_node_source")):
        energy = r.get("energy_node_j")
        value = "unavailable" if _missing(energy) else f"{_fmt(energy, '.4g')} J"
        note = f" ({cell(r['energy_node_note'])})" if r.get("energy_node_note") else ""
        parts.append(f"node meter ({cell(r['energy_node_source'])}) {value}{note}, beside J/token")
    if not _missing(r.get("energy_host_source")):
        parts.append(f"CPU/DRAM from {cell(r['energy_host_source'])}, beside the GPUs")
    return "; ".join(parts)
