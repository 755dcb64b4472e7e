"""One configuration in depth: its runs, environment, how far to trust them, repeats, ranks,
power; and its history, per commit, branch, label or day.

A run's trust (`greenbench.vocabulary.trust`) is spelled out above its figures: contended (how
busy the machine was, in counts), an unreliable idle baseline (net energy unknown, with why),
a differing MFU peak, the interval its repeats allow. A net energy below zero (a database never
migrated) is shown unknown, and a rank that reads no meter (its node's CPU is read by local rank
0) has an empty energy cell, never "0"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from greenbench.dashboard_app import apart_views, charts, data, marking
from greenbench.reporting import axes
from greenbench.reporting.leaderboard import history
from greenbench.vocabulary import trust

REPEAT_ENERGY = (
    "energy_j",
    "energy_net_j",
    "energy_gpu_j",
    "energy_cpu_j",
    "energy_dram_j",
    "joules_per_token",
    "net_joules_per_token",
    "wait_energy_j",
    "co2_g",
)

ANY = "(any)"
#: each axis's point, as the view names it
POINT_WORDS = {"commit": "git sha", "branch": "branch", "label": "label", "date": "day"}
#: each axis's choice, as the radio shows it
AXIS_WORDS = {"commit": "commit", "branch": "branch", "label": "label", "date": "day"}
#: what a run needs to be on a point of an axis, in words
NEEDS = {"commit": "a git sha", "branch": "a git branch"}


def config_label(row: pd.Series) -> str:
    """One configuration in a selector: a simulated, emulated or own-measurement row says so
    first."""
    busy = f" · {trust.CONTENDED}" if trust.flagged(row.get("contended")) else ""
    tag = apart_views.kind_tag(row)
    return (
        (f"[{tag}] " if tag else "")
        + f"{row['config_name']} · {row['workload']} · {row['devices']} × {row['device_type']}"
        f" · {marking.energy_label(row['energy_source'], row['energy_measured'])}{busy}"
    )


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value if value is not None else {}


def _sha(sha: object) -> str:
    """A commit as a label shows it: its first 10 characters, or "unknown" (never "None")."""
    return "unknown" if trust.missing(sha) else str(sha)[:10]


def _peak(flops: object, source: object) -> str:
    if flops is None or pd.isna(flops):
        return "–"
    return f"{float(flops) / 1e12:.4g} TFLOP/s per device ({source or 'source unknown'})"


def _item(key: str) -> str:
    """A fingerprint key in words ("memory_bytes" → "memory", "gpu_driver" → "gpu driver")."""
    return key.removesuffix("_bytes").replace("_", " ")


def _value(key: str, value: Any) -> Any:
    """A fingerprint value as read: bytes in GiB, a list joined ("none" when empty)."""
    if key.endswith("_bytes") and isinstance(value, int | float) and not trust.missing(value):
        return f"{value / 2**30:.1f} GiB"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return value


def fingerprint(rec: dict[str, Any]) -> pd.DataFrame:
    """The environment a run measured on, as (item, value) rows."""
    items: list[tuple[str, Any]] = [
        ("host", rec.get("host")),
        (
            "device",
            f"{rec.get('nproc')} × {rec.get('device_type')} ({rec.get('device')}), "
            f"{rec.get('nnodes')} node(s)",
        ),
        ("git sha", rec.get("git_sha") if not trust.missing(rec.get("git_sha")) else "unknown"),
        (
            "energy source",
            marking.energy_label(rec.get("energy_source"), rec.get("energy_measured")),
        ),
        ("MFU peak", _peak(rec.get("peak_flops"), rec.get("peak_flops_source"))),
        (
            "carbon",
            f"{marking.text_cell(rec.get('region'))}: "
            f"{marking.fmt(rec.get('carbon_intensity_g_per_kwh'))} gCO2/kWh",
        ),
        (
            "started / finished",
            f"{marking.text_cell(rec.get('started_at'))} / "
            f"{marking.text_cell(rec.get('finished_at'))}",
        ),
        ("label", rec.get("label")),
    ]
    for prefix, blob in (("hardware", rec.get("hardware")), ("version", rec.get("versions"))):
        parsed = _json(blob)
        if isinstance(parsed, dict):
            items += [(f"{prefix}: {_item(k)}", _value(k, v)) for k, v in parsed.items()]
    return pd.DataFrame(
        {"item": [k for k, _ in items], "value": [marking.text_cell(v) for _, v in items]}
    )


def config_detail(db: Path, row: pd.Series, key: str) -> None:
    """Everything stored about one configuration's runs (``row``: a labelled board row)."""
    st.markdown(f"### {row['config_name']}")
    st.caption(config_label(row))
    tag = apart_views.kind_tag(row)
    if tag in ("simulated", "emulated"):
        st.warning(apart_views.SIMULATED_WARNING)
    elif tag:
        st.info(apart_views.OWN_NOTE)
    runs = data.runs_of(db, str(row["config_key"]))
    runs = runs[runs["energy_source"].fillna(row["energy_source"]) == row["energy_source"]]
    if runs.empty:
        st.info("No stored run of this configuration.")
        return
    labels = {
        r.run_id: f"{r.run_id} · {r.status} · sha {_sha(r.git_sha)} · {r.started_at}"
        for r in runs.itertuples()
    }
    ids = list(labels)
    latest = str(row["latest_run_id"])
    run_id = st.selectbox(
        "Run",
        ids,
        index=ids.index(latest) if latest in ids else 0,
        format_func=labels.get,
        key=f"{key}_run",
    )
    rec = data.run_record(db, run_id)
    if rec is None:
        st.warning(f"Run {run_id} disappeared from the database.")
        return
    if rec["status"] != "ok":
        st.error(
            f"Run {run_id} {rec['status']}"
            + (f" on rank {rec['failed_rank']}" if pd.notna(rec.get("failed_rank")) else "")
            + f": {rec.get('error') or 'no error text stored'}"
        )
    left, right = st.columns(2)
    with left:
        st.markdown("**Configuration**")
        st.json(_json(rec.get("config")), expanded=2)
    with right:
        st.markdown("**Environment**")
        st.dataframe(fingerprint(rec), hide_index=True, placeholder=marking.MISSING)
    measured = bool(rec.get("energy_measured"))
    if rec["status"] == "ok":
        _trust(rec, data.run_results(db, run_id))
    _repeats(db, run_id, measured)
    _events(db, run_id, measured)
    _ranks(db, run_id, key)
    _power(db, run_id, measured)


def _events(db: Path, run_id: str, measured: bool) -> None:
    """A fault-tolerant run's checkpoints, failures, restarts and redone work, one row each
    (nothing for any other run)."""
    events = data.run_events(db, run_id)
    if events.empty:
        return
    kinds = events["kind"].value_counts()
    title = "Events: " + ", ".join(f"{n} {k}" for k, n in kinds.items())
    with st.expander(title):
        st.dataframe(events, hide_index=True, placeholder=marking.MISSING)
        st.caption(
            "step: measured steps done (warm-up not counted); t_s: seconds from the first "
            "measured step; seconds: wall clock, the slowest rank's; joules: summed over the "
            "ranks' meters"
            + ("" if measured else " (estimated here: no energy counter)")
            + "; note: what a figure estimates or leaves out."
        )


def _trust(rec: dict[str, Any], res: pd.DataFrame) -> None:
    """How far to trust one run: a warning per signal that lowers it, then every signal."""
    notes = [n for n in res.get("idle_note", pd.Series(dtype=object)) if isinstance(n, str) and n]
    negative = (
        (pd.to_numeric(res.get("energy_net_j"), errors="coerce") < 0).sum() if len(res) else 0
    )
    run_trust = trust.Trust.of(
        rec
        | {
            "idle_power_w": res["idle_power_w"].iloc[0] if len(res) else None,
            "idle_note": notes[0] if notes else "",
            "n_idle_unreliable": len(notes) + int(negative),
        },
        n_repeats=len(res),
    )
    st.markdown("**How far to trust it**")
    for detail in run_trust.details():
        (st.warning if detail.startswith(("contended", "net energy")) else st.info)(detail)
    st.caption("; ".join(run_trust.signals()))


def _not_estimated(res: pd.DataFrame) -> pd.Series:
    """Which repeats' energy is not an estimate (measured, or a model's: those are labelled
    simulated or emulated above the table, never "≈ … (est.)")."""
    kinds = [trust.energy_kind(s, m) for s, m in zip(res["energy_source"], res["energy_measured"],
                                                      strict=True)]  # fmt: skip
    return pd.Series([k != "estimated" for k in kinds], index=res.index)


def _modelled(res: pd.DataFrame) -> bool:
    return any(
        trust.energy_kind(s, False) in ("simulated", "emulated") for s in res["energy_source"]
    )


def _repeats(db: Path, run_id: str, measured: bool) -> None:
    st.markdown("**Every repeat**")
    res = data.run_results(db, run_id)
    if res.empty:
        st.info("This run stored no repeat.")
        return
    for column in ("energy_net_j", "net_joules_per_token"):  # never a negative net figure
        if column in res:
            values = pd.to_numeric(res[column], errors="coerce")
            res[column] = values.where(~(values < 0))
    st.dataframe(
        marking.style_marked(
            marking.readable(res, keep=REPEAT_ENERGY),
            _not_estimated(res),
            (*map(marking.heading, REPEAT_ENERGY), "energy"),
        ),
        hide_index=True,
        placeholder=marking.MISSING,
    )
    if not measured and not _modelled(res):
        st.caption(marking.ESTIMATE_NOTE)


def _ranks(db: Path, run_id: str, key: str) -> None:
    ranks = data.rank_results(db, run_id)
    st.markdown("**Per rank: where the time went, and energy**")
    if ranks.empty:
        st.info("No per-rank rows were stored for this run.")
        return
    repeats = sorted(ranks["repeat"].unique().tolist())
    repeat = (
        st.selectbox("Repeat", repeats, key=f"{key}_repeat") if len(repeats) > 1 else repeats[0]
    )
    one = ranks[ranks["repeat"] == repeat]
    st.altair_chart(charts.rank_split_chart(one), width="stretch")
    cols = [
        "rank",
        "local_rank",
        "host",
        "tokens",
        "seconds",
        "compute_s",
        "comm_s",
        "wait_s",
        "n_microbatches",
        "peak_mem_bytes",
        "energy_source",
        "energy_j",
        "energy_gpu_j",
        "energy_cpu_j",
        "energy_dram_j",
        "energy_note",
    ]
    table = one[[c for c in cols if c in one.columns]].reset_index(drop=True)
    if "energy_j" in table:  # a rank whose node's CPU local rank 0 reads stored a 0 J window
        elsewhere = (table["local_rank"] != 0) & (pd.to_numeric(table["energy_j"]) == 0)
        table["energy_j"] = pd.to_numeric(table["energy_j"]).where(~elsewhere)
    # each rank's window says whether it read a counter (any source's estimate is marked);
    # rows stored before that was kept fall back to the estimate's name
    named = (table["energy_source"].fillna("estimate") != "estimate").astype("boolean")
    flag = one.get("energy_measured", pd.Series(pd.NA, index=one.index)).astype("boolean")
    measured = flag.reset_index(drop=True).fillna(named).astype(bool)
    energy = ("energy_j", "energy_gpu_j", "energy_cpu_j", "energy_dram_j")
    st.dataframe(
        marking.style_marked(
            marking.readable(table, keep=energy),
            measured,
            (*map(marking.heading, energy), "energy"),
        ),
        hide_index=True,
        placeholder=marking.MISSING,
    )
    st.caption(
        "Energy is read once per device (GPU by its rank, CPU/DRAM by local rank 0): "
        "an empty energy cell is a rank that reads no meter, not a zero."
    )


def _power(db: Path, run_id: str, measured: bool) -> None:
    samples = data.power_samples(db, run_id)
    st.markdown("**Power time series**")
    if samples.empty:
        st.info(
            "No power time series was sampled for this run (the energy source reads a "
            "cumulative counter or is an estimate)."
        )
        return
    st.altair_chart(charts.power_chart(samples, measured), width="stretch")


def _labelled(board: pd.DataFrame) -> dict[str, pd.Series]:
    labelled = marking.with_labels(board)
    return {r["row_id"]: r for _, r in labelled.iterrows()}


def _choices(board: pd.DataFrame, apart: pd.DataFrame | None) -> dict[str, pd.Series]:
    """Every configuration a detail view can open: the leaderboard's, then those shown apart
    (simulated, emulated, own measurements), labelled so (`config_label`)."""
    rows = _labelled(board)
    if apart is not None and len(apart):
        rows |= _labelled(apart)
    return rows


def run_detail_tab(db: Path, board: pd.DataFrame, apart: pd.DataFrame | None = None) -> None:
    st.subheader("Run detail")
    rows = _choices(board, apart)
    if not rows:
        st.info("No configuration matches the filters.")
        return
    row_id = st.selectbox(
        "Configuration",
        list(rows),
        key="detail_config",
        format_func=lambda r: config_label(rows[r]),
    )
    config_detail(db, rows[row_id], key="detail")


def _options(rows: pd.DataFrame, column: str) -> list[str]:
    values = rows[column] if column in rows else pd.Series(dtype=object)
    return [ANY, *sorted({str(v) for v in values.dropna() if str(v)})]


def history_tab(
    repeats: pd.DataFrame, board: pd.DataFrame, apart: pd.DataFrame | None = None
) -> None:
    """One configuration over time: the user picks the axis (what one point pools: the runs
    of one commit, branch, label or day; `greenbench.reporting.axes`) and, optionally, one git
    branch and one label. Each label is a series of its own, so runs under different labels
    are never one point. The default axis is the commit where every run of the configuration
    has a git sha, else the day: runs started outside a checkout are never pooled into one
    "unknown" commit. Runs without a value on the chosen axis are counted under the charts."""
    st.subheader("History of one configuration")
    st.caption(
        "Joules per token and tokens/s of one configuration per commit, branch, label or day, "
        "ordered by the first run of each point; each label is a series of its own: the series "
        "CI regression tracking watches."
    )
    rows = _choices(board, apart)
    if not rows:
        st.info("No configuration matches the filters.")
        return
    row_id = st.selectbox(
        "Configuration",
        list(rows),
        key="history_config",
        format_func=lambda r: config_label(rows[r]),
    )
    row = rows[row_id]
    key, source = str(row["config_key"]), str(row["energy_source"])
    own = repeats[(repeats["config_key"] == key) & (repeats["energy_source"] == source)]
    left, middle, right = st.columns(3)
    by = left.radio(
        "One point per",
        list(axes.AXES),
        index=axes.AXES.index(axes.default_axis(own)),
        format_func=AXIS_WORDS.get,
        horizontal=True,
        key="history_by",
        help="Commit: the runs of one git sha. Branch: of one git branch. Label: of one "
        "--label. Day: started on one day (UTC). The default is the commit where every run "
        "has a git sha, else the day.",
    )
    branch = middle.selectbox("Git branch", _options(own, "git_branch"), key="history_branch")
    label = right.selectbox("Label", _options(own, "label"), key="history_label")
    hist = history(
        repeats,
        key,
        source,
        by=by,
        branch=None if branch == ANY else branch,
        label=None if label == ANY else label,
    )
    left_out = int(hist.attrs.get("left_out", 0))
    if hist.empty:
        st.info(
            "No repeats of this configuration pass the filters"
            + (f" ({left_out} runs have no value on this axis)." if left_out else ".")
        )
        return
    hist["energy"] = [
        marking.energy_label(s, m)
        for s, m in zip(hist["energy_source"], hist["energy_measured"], strict=True)
    ]
    hist["energy_kind"] = marking.kind_names(hist)
    hist["shown"] = hist["point"].map(_sha) if by == "commit" else hist["point"]
    tag = apart_views.kind_tag(row)
    if tag in ("simulated", "emulated"):
        st.warning(apart_views.SIMULATED_WARNING)
    word = POINT_WORDS[by]
    if hist["point"].nunique() == 1:
        st.info(f"Only one {word} so far: history needs runs from at least two.")
    left, right = st.columns(2)
    title = f"{word} (order of first run)"
    left.altair_chart(charts.history_chart(hist, "joules_per_token", title), width="stretch")
    right.altair_chart(charts.history_chart(hist, "tokens_per_s", title), width="stretch")
    if left_out:
        runs = "run has" if left_out == 1 else "runs have"
        st.caption(f"{left_out} {runs} no {NEEDS.get(by, 'value')}: on no point of this axis.")
    described = {  # the point's own column first; the others where they say more
        "label": hist["series"],
        "git sha": hist["git_sha"].map(lambda s: s if s == "mixed" else _sha(s)),
        "branch": hist["git_branch"].map(marking.text_cell),
    }
    table = pd.DataFrame(
        {
            word: hist["shown"],
            **{name: column for name, column in described.items() if name != word},
            "J/token": hist["joules_per_token"],
            "J/token net": hist["net_joules_per_token"],
            "tokens/s": hist["tokens_per_s"],
            "repeats": hist["n_repeats"],
            "runs": hist["n_runs"],
            "trust": hist["trust"],
            "interval": hist["interval"],
            "first run": hist["first_started_at"].map(marking.text_cell),
            "energy": hist["energy"],
        }
    )
    st.caption(marking.interval_note(hist["n_repeats"]) + " " + marking.TRUST_NOTE)
    st.dataframe(
        marking.style_marked(
            table.reset_index(drop=True), _not_estimated(hist), ("J/token", "J/token net", "energy")
        ),
        hide_index=True,
        placeholder=marking.MISSING,
    )
