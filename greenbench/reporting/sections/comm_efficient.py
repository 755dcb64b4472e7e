"""The report's section on communication-efficient data parallelism: per rank count, what each
method moves per step and how long a step takes on the host's own transport and over an
emulated slow link (`greenbench.reporting.comm_efficient.read_methods`); energy and time to a
target loss per method over seeds (`read_targets`); bytes per step against energy to target
as a PNG; and what the runs say, computed, "cannot tell" included."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from greenbench.reporting.cells import ESTIMATE_FOLLOWS_TIME, g, row
from greenbench.reporting.comm_efficient import (
    DDP,
    OWN_TRANSPORT,
    method_order,
    read_methods,
    read_targets,
    with_bytes,
)
from greenbench.reporting.section import ReportContext
from greenbench.reporting.target_findings import Verdict, basis, compare
from greenbench.reporting.to_target import LABELS, cell, number, seeds_caption, spread
from greenbench.vocabulary.trust import interval_for

PNG = "comm-efficient.png"
TITLE = "Communication-efficient data parallelism"


def bytes_text(b: float) -> str:
    """Bytes in B, KiB, MiB or GiB, 4 significant digits; "n/a" when unknown."""
    if b is None or not math.isfinite(float(b)):
        return "n/a"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{g(b / size)} {unit}"
    return f"{g(b)} B"


def fewer_text(ratio: float) -> str:
    """DDP's bytes ÷ a method's: "×12.5 fewer", "as many" (equal to two decimals), "×0.5 (more)"."""
    if ratio is None or not math.isfinite(float(ratio)):
        return "n/a"
    if round(ratio, 2) == 1.0:
        return "as many"
    return f"×{g(ratio)} fewer" if ratio > 1 else f"×{g(ratio)} (more)"


def _links(group: pd.DataFrame) -> list[str]:
    links = sorted(set(group["link"]) - {OWN_TRANSPORT})
    return ([OWN_TRANSPORT] if OWN_TRANSPORT in set(group["link"]) else []) + links


def _step_cell(r: pd.Series | None) -> str:
    if r is None or pd.isna(r["step_s"]):
        return "—"
    text = f"{g(r['step_s'] * 1000)} ms"
    if r["method"] != DDP and pd.notna(r["step_ratio"]):
        text += f" (×{r['step_ratio']:.2f})"
    return text


def _jpt_cell(r: pd.Series | None) -> str:
    if r is None or pd.isna(r["joules_per_token"]):
        return "—"
    return f"{g(r['joules_per_token'])}, {r['energy']}"


def _wait_cell(r: pd.Series | None) -> str:
    return "—" if r is None or pd.isna(r["wait_share"]) else f"{r['wait_share']:.1%}"


def method_lines(methods: pd.DataFrame) -> list[str]:
    """A table per device type and rank count: method × link."""
    lines: list[str] = []
    several = methods["device_type"].nunique() > 1
    for (device, nproc), group in methods.groupby(["device_type", "nproc"], sort=False):
        links = _links(group)
        heads = ["method", "bytes/step/rank", "vs DDP"]
        for link in links:
            heads += [f"step time, {link} (× DDP)", f"waiting, {link}", f"J/token, {link}"]
        lines += ["", f"**{nproc} ranks**" + (f" on {device}" if several else ""), ""]
        lines += [row(heads), row(["---"] * len(heads))]
        for method, rows in group.groupby("method", sort=False):
            by_link = {r["link"]: r for _, r in rows.iterrows()}
            first = next(by_link[link] for link in links if link in by_link)
            cells = [
                method,
                bytes_text(first["bytes_per_step"]),
                "—" if method == DDP else fewer_text(first["bytes_fewer"]),
            ]
            for link in links:
                r = by_link.get(link)
                cells += [_step_cell(r), _wait_cell(r), _jpt_cell(r)]
            lines.append(row(cells))
    return lines


def target_lines(targets: pd.DataFrame) -> list[str]:
    """The methods' energy and time to target over seeds, each seed's outcome beside."""
    heads = [
        "method", "ranks", "target loss", "reached", LABELS["energy_to_target_j"],
        LABELS["seconds_to_target"], "per seed", "energy",
    ]  # fmt: skip
    lines = [row(heads), row(["---"] * len(heads))]
    for _, r in targets.iterrows():
        best = float(r["best_not_reached"])
        lines.append(
            row(
                [
                    r["method"], int(r["devices"]), g(r["target_loss"]),
                    f"{r['n_reached']}/{r['n_seeds']} seeds",
                    cell(spread(r, "energy_to_target_j"), best),
                    cell(spread(r, "seconds_to_target"), best), r["per_seed"], r["energy"],
                ]
            )
        )  # fmt: skip
    return lines


# ------------------------------------------------------------------------------ findings


def bytes_findings(methods: pd.DataFrame) -> list[str]:
    """Per rank count: which methods moved fewer bytes per step than DDP, and by how much
    (bytes do not depend on the link: read on the host's own transport where it ran)."""
    out = []
    for (device, nproc), group in methods.groupby(["device_type", "nproc"], sort=False):
        rows = group.sort_values(
            "link", key=lambda s: s != OWN_TRANSPORT, kind="stable"
        ).drop_duplicates("method")
        rows = rows[(rows["method"] != DDP) & rows["bytes_fewer"].map(_finite)]
        rows = rows.iloc[
            sorted(range(len(rows)), key=lambda i: method_order(rows["method"].iloc[i]))
        ]
        if rows.empty:
            continue
        said: dict[str, list[str]] = {"fewer": [], "as many": [], "more": []}
        for _, r in rows.iterrows():
            text, ratio = fewer_text(r["bytes_fewer"]), float(r["bytes_fewer"])
            if text == "as many":
                said["as many"].append(r["method"])
            elif ratio > 1:
                said["fewer"].append(f"{r['method']} ×{g(ratio)}")
            else:
                said["more"].append(f"{r['method']} ×{g(1 / ratio)}")
        parts = [f"fewer bytes per step and rank than DDP: {', '.join(said['fewer'])} fewer"]
        parts += [f"as many as DDP: {', '.join(said['as many'])}"]
        parts += [f"more than DDP: {', '.join(said['more'])} more"]
        parts = [p for p, k in zip(parts, said.values(), strict=True) if k]
        out.append(f"- {nproc} ranks on {device}: " + "; ".join(parts) + ".")
    return out


def _speed_word(v: Verdict) -> str:
    return {"less": "faster", "more": "slower"}.get(v.word, "cannot tell")


def speed_findings(methods: pd.DataFrame) -> list[str]:
    """Per rank count and emulated link: which methods took less time per step than DDP over
    it, judged on their step times over the repeats (`compare`)."""
    out = []
    slow = methods[(methods["link"] != OWN_TRANSPORT) & (methods["method"] != DDP)]
    for (device, nproc, link), group in slow.groupby(["device_type", "nproc", "link"], sort=False):
        said: dict[str, list[str]] = {"faster": [], "slower": [], "cannot tell": []}
        for _, r in group.iterrows():
            v = r["step_verdict"]
            ratio = f"×{r['step_ratio']:.2f} the step time" if _finite(r["step_ratio"]) else ""
            why = v.why if v.word == "cannot tell" else ratio
            said[_speed_word(v)].append(f"{r['method']}" + (f" ({why})" if why else ""))
        n = min((len(t) for t in group["step_times"]), default=0)
        judged = {
            "ci": "judged on 95 % CIs over the repeats",
            "range": f"judged on the min–max ranges of as few as {n} repeats: not CIs, a weak test",
        }.get(interval_for(n).kind, "one repeat: no interval to judge on")
        parts = [
            (
                f"**{w}** than DDP"
                if w != "cannot tell"
                else "**cannot tell** whether faster than DDP"
            )
            + f": {', '.join(ms)}"
            for w, ms in said.items()
            if ms
        ]
        out.append(f"- {nproc} ranks over the {link} on {device}: " + "; ".join(parts)
                   + f"; {judged}.")  # fmt: skip
    return out


def target_findings(targets: pd.DataFrame) -> list[str]:
    """Which methods reached the target with less energy (and in less time) than DDP of the
    same rank count and energy label, over seeds (`compare`: "cannot tell" where the intervals
    overlap)."""
    out = []
    for (_, label), group in targets.groupby(["devices", "energy"], sort=False):
        base = group[group["method"] == DDP]
        if base.empty:
            continue
        ddp = base.iloc[-1]
        for _, r in group[group["method"] != DDP].iterrows():
            joules = compare(spread(r, "energy_to_target_j"), spread(ddp, "energy_to_target_j"))
            time = compare(spread(r, "seconds_to_target"), spread(ddp, "seconds_to_target"))
            estimate = f"; {ESTIMATE_FOLLOWS_TIME}" if label == "estimate" else ""
            missed = (
                ""
                if spread(r, "energy_to_target_j").reached
                else f"; its median seed did not reach the target (budget spent: "
                f"{number(float(r['budget_j']), 'J')})"
            )
            out.append(
                f"- {r['method']} at {int(r['devices'])} ranks against DDP: "
                f"**{_said(joules, 'less energy', 'more energy', 'which spends less energy')}**, "
                f"**{_said(time, 'less time', 'more time', 'which takes less time')}** to the "
                f"target (energy: {label}{estimate}){missed}; {basis(r, ddp)}. "
                f"{r['method']}: {_energy_cell(r)}; DDP: {_energy_cell(ddp)}."
            )
    return out


def _energy_cell(r: pd.Series) -> str:
    return cell(spread(r, "energy_to_target_j"), float(r["best_not_reached"]), "J")


def _said(v: Verdict, less: str, more: str, which: str) -> str:
    """A verdict in words: ``less``, ``more``, or "cannot tell {which} (why)"."""
    if v.word == "less":
        return less
    if v.word == "more":
        return more
    return f"cannot tell {which} ({v.why})"


def _finite(v: object) -> bool:
    try:
        return math.isfinite(float(v))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------------------ figure


def plot(targets: pd.DataFrame, path: Path) -> bool:
    """Bytes per step and rank (x, log) against energy to target (y), one point per method
    with its interval over seeds; a method whose median seed did not reach the target drawn
    hollow at the energy its budget spent, marked so. False (nothing written) where no method
    has both figures."""
    drawn = targets[targets["bytes_per_step"].map(_finite) & targets["budget_j"].map(_finite)
                    | targets["bytes_per_step"].map(_finite)
                    & targets["energy_to_target_j"].map(_finite)]  # fmt: skip
    if drawn.empty:
        return False
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot(1, 1, 1)
    top = max(
        [float(v) for v in drawn["energy_to_target_j_high"] if _finite(v)]
        + [float(v) for v in drawn["budget_j"] if _finite(v)]
        + [float(v) for v in drawn["energy_to_target_j"] if _finite(v)]
    )
    for i, (_, r) in enumerate(drawn.iterrows()):
        colour = f"C{i % 10}"
        x = float(r["bytes_per_step"])
        name = f"{r['method']} ×{int(r['devices'])} ({r['energy']})"
        s = spread(r, "energy_to_target_j")
        if s.reached:
            high = s.high if math.isfinite(s.high) else top * 1.1
            ax.errorbar(
                [x], [s.median], yerr=[[s.median - s.low], [high - s.median]], fmt="o",
                color=colour, capsize=4, label=name,
            )  # fmt: skip
            if not math.isfinite(s.high):
                ax.annotate("a seed not reached ↑", (x, high), fontsize=7, ha="center")
        else:
            ax.plot([x], [float(r["budget_j"])], "o", mfc="none", color=colour, ms=9,
                    label=f"{name}: not reached")  # fmt: skip
            best = float(r["best_not_reached"])
            note = "not reached" + (f" (best {best:.3g})" if _finite(best) else "")
            ax.annotate(note + ",\nits budget's energy", (x, float(r["budget_j"])),
                        textcoords="offset points", xytext=(6, 6), fontsize=7)  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("bytes per step and rank (log scale)")
    labels = " / ".join(sorted(set(drawn["energy"])))
    ax.set_ylabel(f"{LABELS['energy_to_target_j']} — {labels}")
    ax.set_ylim(bottom=0, top=top * 1.2)
    ax.set_title("Bytes per step against energy to target, over seeds", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    return True


# ------------------------------------------------------------------------------ section


def section_lines(methods: pd.DataFrame, targets: pd.DataFrame, out_dir: Path) -> list[str]:
    """The section over the method table (`read_methods`) and the methods to a target
    (`read_targets`); none where neither holds a row."""
    if methods.empty and targets.empty:
        return []
    lines = [
        "",
        f"## {TITLE}",
        "",
        "DDP against gradient compression (bf16, fp16, PowerSGD), infrequent synchronisation "
        "(local SGD, DiLoCo: parameters averaged every H steps) and bounded staleness, each "
        "on the host's own transport and over an emulated link (a collective made to last as "
        "long as a ring over that link would). Bytes per step and rank: what a rank's "
        "collectives moved in the window ÷ its steps, averaged over ranks; step time: the "
        "window's seconds ÷ its steps; waiting: the share of the window a rank waited for the "
        "others. Medians over the newest run's repeats; × DDP against DDP at the same rank "
        "count on the same link. Compression and local steps change what the model learns: "
        "J/token does not say what a method costs, energy to a target loss does (below).",
    ]
    if len(methods):
        lines += method_lines(methods)
        if (methods["energy"] == "estimate").any():
            lines += ["", f"J/token labelled estimate is an {ESTIMATE_FOLLOWS_TIME}."]
    if len(targets):
        targets = with_bytes(targets, methods)
        lines += [
            "",
            "### Energy and time to a target loss",
            "",
            "The convergence suite's runs of these methods (evaluated at whole periods), each "
            "seed trained from initialisation to the target or to its budget, pooled over seeds "
            "as in the section on energy to a target loss: a seed that did not reach counts as "
            "above every one that did, and says how close it got.",
            "",
            *target_lines(targets),
            "",
            seeds_caption(targets["n_seeds"]),
        ]
        if plot(targets, out_dir / PNG):
            lines += [
                "",
                f"![Bytes per step against energy to target]({PNG})",
                "",
                "Bytes per step as the comm-efficient workload measured them at the same rank "
                "count (on the host's own transport where it ran there); bars: the interval "
                "over seeds. A hollow marker is a method whose median seed did not reach the "
                "target, drawn at the energy its budget spent: reaching would have cost at "
                "least that.",
            ]
        else:
            lines += [
                "",
                "No chart of bytes per step against energy to target: the comm-efficient "
                "workload measured none of these methods' bytes at their rank count.",
            ]
        unplaced = targets[~targets["bytes_per_step"].map(_finite)]
        if len(unplaced) < len(targets) and len(unplaced):
            lines[-1] += " Not drawn, the comm-efficient workload did not measure their " + (
                f"bytes: {', '.join(unplaced['method'])}."
            )
    said = [
        ("Bytes moved", bytes_findings(methods) if len(methods) else []),
        ("Over the slow link", speed_findings(methods) if len(methods) else []),
        ("To the target", target_findings(targets) if len(targets) else []),
    ]
    if any(found for _, found in said):
        lines += ["", "### What the runs say"]
        for heading, found in said:
            if found:
                lines += ["", f"**{heading}**:", "", *found]
    return lines


class CommEfficientSection:
    """`ReportSection`: communication-efficient data parallelism against DDP."""

    name = "comm-efficient"
    order = 66
    doc = (
        "DDP against compression, local SGD, DiLoCo, staleness: bytes, step time, energy to target"
    )

    def applies(self, context: ReportContext) -> bool:
        """Every report: the section is empty where none of its runs is there."""
        return True

    def render(self, context: ReportContext) -> list[str]:
        """The tables, the PNG and the findings over the runs the report covers."""
        ids = set(context.raw["run_id"]) if "run_id" in context.raw else set()
        return section_lines(
            read_methods(context.db_path, ids), read_targets(context.db_path, ids), context.out_dir
        )


__all__ = ["CommEfficientSection", "section_lines"]
