"""The report keeps apart what is not comparable, and says what each figure is.

Why: a CPU user following docs/power-limits.md or docs/skippipe.md stores only simulated or
emulated runs and must still get those sections (labelled as models) with a note that there is
no measured leaderboard; `greenbench measure` results (an own loop, a whole process) are not
training windows and get a table of their own; a SkipPipe run that skips stages trains part of
the model per token and is never ranked beside full-model runs on J/token, and fronts are drawn
per workload. The PNGs must be readable: labels that do not run together, titles inside the
figure, front points named. Databases are written through the real ``Store``, as the launcher
and ``greenbench measure`` write them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from greenbench.reporting import figures
from greenbench.reporting.power_limits import plot, read_sweeps
from greenbench.reporting.report import write_report
from greenbench.results import RepeatResult, RunOutcome
from greenbench.store import Store

LIMITS = [(700, 96000, 0.00656), (595, 94200, 0.00632), (490, 88300, 0.00555),
          (385, 81500, 0.00473)]  # fmt: skip
SKIPPIPE = {"skippipe.stages": "1-2-1", "skippipe.skip": 0.5, "emulate.slow_nodes": "",
            "model.family": "transformer", "model.size": "tiny", "data.seq_len": 256}  # fmt: skip


def _row(run_id: str, workload: str, name: str, **kw: Any) -> dict[str, Any]:
    settings = kw.pop("settings", {})
    return {
        "run_id": run_id, "suite": None, "workload": workload, "config_name": name,
        "config_key": kw.pop("config_key", f"key-{run_id}"),
        "config": {"workload": workload, "settings": settings},
        "model_family": "transformer", "model_size": "tiny",
        "strategy": kw.pop("strategy", "single"), "layout": "dpr1-dps1-tp1-pp1-cp1",
        "device": "cpu", "device_type": kw.pop("device_type", "cpu:test"), "nproc": 1,
        "nnodes": 1, "precision": "fp32", "seq_len": 128, "lengths": "fixed", "git_sha": "abc",
        "host": "bench-01", **kw,
    }  # fmt: skip


def _repeat(k: int, jpt: float | None, tps: float, source: str, **kw: Any) -> RepeatResult:
    measured = source in ("rapl", "nvml", "zeus")
    return RepeatResult(
        repeat=k, tokens=4096, seconds=4096 / tps, tokens_per_s=tps, energy_source=source,
        energy_measured=measured, energy_j=None if jpt is None else jpt * 4096,
        energy_net_j=None, energy_gpu_j=None, energy_cpu_j=None, energy_dram_j=None,
        idle_power_w=None, joules_per_token=jpt, net_joules_per_token=None,
        flops=kw.pop("flops", 1e12), mfu=kw.pop("mfu", 0.1), peak_mem_bytes=2**20,
        step_time_p50_s=4096 / tps / 4, step_time_p95_s=4096 / tps / 3, wait_fraction=0.0,
        wait_energy_j=None, co2_g=None, loss=kw.pop("loss", 5.0), **kw,
    )  # fmt: skip


def _store(store: Store, row: dict[str, Any], jpt: float | None, tps: float, source: str,
           repeats: int = 3, **kw: Any) -> None:  # fmt: skip
    store.begin_run(row)
    outcome = [_repeat(k, jpt, tps * (1 + 0.001 * k), source, **kw) for k in range(repeats)]
    store.finish_run(row["run_id"], RunOutcome(status="ok", repeats=outcome))


def _emulated_sweep(store: Store) -> None:
    for i, (limit, tps, jpt) in enumerate(LIMITS):
        settings = {"model.family": "transformer", "model.size": "125m", "emulate.gpu": "h100",
                    "gpu.power_limit_w": limit, "seed": 0}  # fmt: skip
        row = _row(
            f"emu{i}", "power-limit",
            f"transformer/125m seq=1024 fixed single×1 emulated-h100 limit={limit}W",
            settings=settings, power_limit_w=float(limit), power_limit_default_w=700.0,
            device_type="NVIDIA H100 80GB HBM3 (emulated)",
        )  # fmt: skip
        _store(store, row, jpt, tps, "nvml-emulated", gpu_power_avg_w=300.0,
               gpu_power_peak_w=320.0)  # fmt: skip


def _simulated_skippipe(store: Store) -> None:
    for schedule, iteration in (("full", 97.22), ("skippipe", 32.92)):
        settings = SKIPPIPE | {"strategy": "skippipe", "skippipe.mode": "simulate",
                               "skippipe.schedule": schedule, "skippipe.network": "gcp12",
                               "skippipe.stages": "5-3-3-3-3-3", "skippipe.skip": 0.34}  # fmt: skip
        skip = "" if schedule == "full" else " skip=0.34"
        row = _row(
            f"sim-{schedule}", "skippipe",
            f"published/24-layer seq=1024 skippipe[{schedule} 5-3-3-3-3-3{skip} simulated "
            "gcp12]×20",
            settings=settings, strategy="skippipe", simulated=True,
            device_type="simulated:gcp12",
        )  # fmt: skip
        _store(store, row, 0.5 * iteration, 61440 / iteration, "model", repeats=1)


# --- a database with no measured training run (item 7) -----------------------------------------


def test_a_simulated_and_emulated_only_database_reports_their_sections(tmp_path: Path) -> None:
    db = tmp_path / "models.duckdb"
    with Store(db) as store:
        _emulated_sweep(store)
        _simulated_skippipe(store)
    text = write_report(db, tmp_path / "r").read_text()
    assert "**No measured leaderboard.**" in text
    assert "2 simulated (SkipPipe's simulator, modelled energy)" in text
    assert "4 on emulated GPUs (a GPU power model's energy)" in text
    assert "## Leaderboard" not in text and "## Speed against energy" not in text
    sims = text.split("## Simulated configurations (not measured)")[1]
    assert "Simulated, not measured." in sims and "simulated (model)" in sims
    limits = text.split("## GPU power limits")[1]
    assert "These figures come from a model, not a measurement" in limits
    assert "emulated (GPU power model)" in limits and "**Knee: 490 W**" in limits
    assert (tmp_path / "r" / "power-limits.png").is_file()


def test_a_simulated_only_database_says_so_without_emulated_runs(tmp_path: Path) -> None:
    db = tmp_path / "sim.duckdb"
    with Store(db) as store:
        _simulated_skippipe(store)
    text = write_report(db, tmp_path / "r").read_text()
    assert "**No measured leaderboard.**" in text and "emulated GPUs" not in text
    assert "## Simulated configurations (not measured)" in text


# --- greenbench measure: a table of their own (item 9) -----------------------------------------


def _own_runs(store: Store) -> None:
    _store(store, _row("train", "transformer-vs-mamba", "transformer/tiny seq=128"), 1.0, 900,
           "rapl")  # fmt: skip
    # a one-second sleep with --tokens 1000: no FLOPs, no MFU, no loss
    sleep = _row("sleep", "process/sleep", "sleep own process×1", strategy="whole-process",
                 model_family="user", model_size="sleep", seq_len=0)  # fmt: skip
    _store(store, sleep, 0.02, 1000, "rapl", flops=0.0, mfu=None, loss=0.0)
    loop = _row("loop", "loop/mine", "mine own loop×1", strategy="own-loop",
                model_family="user", model_size="mine", seq_len=0)  # fmt: skip
    _store(store, loop, 0.5, 800, "estimate")


def test_own_measurements_have_their_own_table_and_are_off_the_leaderboard(tmp_path: Path):
    db = tmp_path / "own.duckdb"
    with Store(db) as store:
        _own_runs(store)
    text = write_report(db, tmp_path / "r").read_text()
    board = text.split("## Leaderboard")[1].split("\n## ")[0]
    assert "transformer/tiny seq=128" in board
    assert "sleep" not in board and "own loop" not in board
    pareto = text.split("## Speed against energy")[1].split("\n## ")[0]
    assert "sleep" not in pareto and "mine" not in pareto
    assert "## Workload `process/sleep`" not in text and "## Workload `loop/mine`" not in text
    own = text.split("## Your own measurements (`greenbench measure`)")[1].split("\n## ")[0]
    rows = [line for line in own.splitlines() if line.startswith("| own loop") or
            line.startswith("| whole process")]  # fmt: skip
    assert len(rows) == 2
    (sleep,) = [r for r in rows if "sleep own process" in r]
    assert sleep.startswith("| whole process | sleep own process×1 | cpu:test ×1 | measured (rapl)")
    assert "None" not in own and "nan" not in own
    assert "kept off the leaderboard and the Pareto fronts" in own


def test_a_database_of_own_measurements_only_says_there_is_no_leaderboard(tmp_path: Path):
    db = tmp_path / "own.duckdb"
    with Store(db) as store:
        _store(store, _row("loop", "loop/mine", "mine own loop×1", strategy="own-loop"), 0.5,
               800, "estimate")  # fmt: skip
    text = write_report(db, tmp_path / "r").read_text()
    assert "**No measured leaderboard.**" in text and "1 own measurements" in text
    assert "simulated or on emulated GPUs" not in text
    assert "## Your own measurements" in text


# --- partial-model runs and fronts per workload (item 12) ---------------------------------------


def _skippipe_and_dense(store: Store) -> None:
    # the straggler-aware full pipeline, dominated by the plain one here; skipping: off the board
    for schedule, jpt, tps in (("full", 0.9, 1000), ("full-aware", 0.95, 950),
                               ("skippipe", 0.45, 1900)):  # fmt: skip
        settings = SKIPPIPE | {"strategy": "skippipe", "skippipe.mode": "real",
                               "skippipe.schedule": schedule}  # fmt: skip
        skip = "" if schedule.startswith("full") else " skip=0.5"
        name = f"transformer/tiny seq=256 fixed skippipe[{schedule} 1-2-1{skip}]×4"
        row = _row(f"sp-{schedule}", "skippipe", name, settings=settings, strategy="skippipe",
                   nproc=4)  # fmt: skip
        _store(store, row, jpt, tps, "rapl")
    # another workload, slower and costlier than both: it has its own front
    _store(store, _row("dense", "hybrid", "transformer/tiny seq=128 hybrid[dpr2]×2"), 2.0, 500,
           "rapl")  # fmt: skip


def test_a_skipping_run_is_off_the_leaderboard_with_why_and_on_no_front(tmp_path: Path) -> None:
    db = tmp_path / "sp.duckdb"
    with Store(db) as store:
        _skippipe_and_dense(store)
    text = write_report(db, tmp_path / "r").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| skippipe |")]
    assert len(rows) == 2 and not any("skip=0.5" in r for r in rows)  # full-model rows only
    board = text.split("## Leaderboard")[1].split("\n## ")[0]
    assert "> partial model: 1 configuration(s) are not on this leaderboard" in board
    assert "ranked within their own question in the SkipPipe section" in board
    assert "`transformer/tiny seq=256 fixed skippipe[skippipe 1-2-1 skip=0.5]×4`" in board
    fronts = [line for line in text.splitlines() if line.startswith("- Pareto front")]
    assert fronts == [
        "- Pareto front, `hybrid`, energy measured (rapl): "
        "`transformer/tiny seq=128 hybrid[dpr2]×2`",
        "- Pareto front, `skippipe`, energy measured (rapl): "
        "`transformer/tiny seq=256 fixed skippipe[full 1-2-1]×4`",
    ]
    pareto = text.split("## Speed against energy (Pareto front)")[1].split("\n## ")[0]
    assert "skip=0.5" not in pareto  # not drawn at all
    workload = text.split("## Workload `skippipe`")[1]
    fewest = next(line for line in workload.splitlines() if line.startswith("- Fewest J/token"))
    assert "skippipe[full 1-2-1]×4" in fewest
    assert "skip=0.5" not in workload.split("\n## ")[0]  # ranked only in the SkipPipe section
    skippipe = text.split("## SkipPipe against full pipelines (measured)")[1]
    assert "| no straggler | 1 | full | " in skippipe
    assert "| skippipe skip=0.5 |" in skippipe


# --- PNGs a reader can read (item 11) ----------------------------------------------------------


def _figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The figures the report saves, by file name, drawn (so text has a size)."""
    drawn: dict[str, Any] = {}
    save = figures.save

    def keep(fig: Any, path: Path) -> None:
        save(fig, path)
        drawn[path.name] = fig

    monkeypatch.setattr(figures, "save", keep)
    return drawn


def _report_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The figures of a report over SkipPipe and dense runs (`_skippipe_and_dense`)."""
    db = tmp_path / "sp.duckdb"
    with Store(db) as store:
        _skippipe_and_dense(store)
    figures = _figures(monkeypatch)
    write_report(db, tmp_path / "r")
    return figures


def _boxes(ax: Any, renderer: Any) -> list[Any]:
    """The drawn x tick labels of ``ax`` (a tick beyond its limits keeps a label, not drawn)."""
    low, high = sorted(ax.get_xlim())
    return [
        label.get_window_extent(renderer)
        for tick, label in zip(ax.get_xticks(), ax.get_xticklabels(), strict=True)
        if label.get_visible() and label.get_text() and low <= tick <= high
    ]


def _overlap(a: Any, b: Any) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_workload_chart_labels_do_not_run_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _report_figures(tmp_path, monkeypatch)
    fig = figures["workload-skippipe.png"]
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    ax_e, ax_t = fig.axes[:2]
    left = [*_boxes(ax_e, renderer), ax_e.xaxis.label.get_window_extent()]
    right = [*_boxes(ax_t, renderer), ax_t.xaxis.label.get_window_extent()]
    assert not any(_overlap(a, b) for a in left for b in right)
    for ax in (ax_e, ax_t):
        ticks = _boxes(ax, renderer)
        assert not any(_overlap(a, b) for i, a in enumerate(ticks) for b in ticks[i + 1 :])
    # bar labels without the words every configuration shares (those are in the title)
    labels = [t.get_text() for t in ax_e.get_yticklabels()]
    assert labels[0].startswith("skippipe[full]×4") or "transformer/tiny" not in labels[0]
    assert "transformer/tiny seq=256 fixed" in fig.texts[0].get_text()  # the suptitle


def test_pareto_front_points_are_labelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = _report_figures(tmp_path, monkeypatch)
    fig = figures["pareto.png"]
    notes = {ax.get_title(): [t.get_text() for t in ax.texts] for ax in fig.axes}
    assert notes == {
        "hybrid, energy: measured (rapl)": ["transformer/tiny seq=128 hybrid[dpr2]×2"],
        # the words both full pipelines' names share ("1-2-1]×4") are the title's
        "skippipe, energy: measured (rapl)": ["skippipe[full"],
    }


def test_sweep_plot_title_is_whole_and_inside_the_figure(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    name = "transformer/125m seq=1024 fixed single×1 emulated-h100 cpu-quota extra-long-words"
    with Store(db) as store:
        for i, (limit, tps, jpt) in enumerate(LIMITS):
            settings = {"model.family": "transformer", "gpu.power_limit_w": limit, "seed": 0}
            row = _row(f"e{i}", "power-limit", f"{name} limit={limit}W", settings=settings,
                       power_limit_w=float(limit), power_limit_default_w=700.0)  # fmt: skip
            _store(store, row, jpt, tps, "nvml-emulated")
    fig = plot(read_sweeps(db), tmp_path / "p.png")
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    title = fig.axes[0].title
    assert re.sub(r"\s+", " ", title.get_text()).startswith(name)  # whole, never cut with "…"
    box, frame = title.get_window_extent(renderer), fig.bbox
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and box.y1 <= frame.y1
