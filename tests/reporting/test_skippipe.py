"""greenbench.reporting.skippipe: real SkipPipe runs ranked within their condition on useful
tokens, each schedule's gain against the straggler-aware full pipeline, the gains split into
fewer stages and routing around a straggler, simulated runs listed apart."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import duckdb

from greenbench.reporting.refs import query_results
from greenbench.reporting.report import summarise, write_report
from greenbench.reporting.skippipe import pairs, read_runs, section

_spec = importlib.util.spec_from_file_location(
    "report_fixtures", Path(__file__).with_name("test_report.py")
)
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)  # type: ignore[union-attr]

BASE = {
    "strategy": "skippipe", "model.family": "transformer", "model.size": "tiny",
    "data.seq_len": 256, "skippipe.mode": "real", "skippipe.stages": "1-2-1",
    "skippipe.skip": 0.5, "emulate.link_latency_ms": 10.0, "emulate.link_bandwidth_gbps": 1.0,
    "emulate.slowdown": 3.0, "skippipe.fail_node": -1, "skippipe.fail_step": 0, "seed": 0,
    "repeats": 3,
}  # fmt: skip
#: run id -> (settings over BASE, iteration s, loss, energy source)
RUNS = {
    "full0": ({"skippipe.schedule": "full", "emulate.slow_nodes": ""}, 2.0, 5.00, "rapl"),
    "skip0": ({"skippipe.schedule": "skippipe", "emulate.slow_nodes": ""}, 1.25, 5.10, "rapl"),
    "full1": ({"skippipe.schedule": "full", "emulate.slow_nodes": "2"}, 3.0, 5.01, "rapl"),
    "skip1": ({"skippipe.schedule": "skippipe", "emulate.slow_nodes": "2"}, 1.5, 5.12, "rapl"),
    "aware1": ({"skippipe.schedule": "full-aware", "emulate.slow_nodes": "2"}, 2.4, 5.00, "rapl"),
    "rand1": ({"skippipe.schedule": "random", "emulate.slow_nodes": "2"}, 2.0, 5.11, "rapl"),
    "simf": (
        {"skippipe.schedule": "full", "emulate.slow_nodes": "", "skippipe.mode": "simulate",
         "skippipe.network": "gcp12", "skippipe.stages": "5-3-3-3-3-3"},
        97.22, None, "model",
    ),
    "sims": (
        {"skippipe.schedule": "skippipe", "emulate.slow_nodes": "", "skippipe.mode": "simulate",
         "skippipe.network": "gcp12", "skippipe.stages": "5-3-3-3-3-3", "skippipe.skip": 0.34},
        32.92, None, "model",
    ),
}  # fmt: skip


def _skip(settings: dict[str, Any]) -> str:
    """What a skipping run's name says of it (`RunSpec.name`), the repeat rows' only clue."""
    full = settings["skippipe.schedule"].startswith("full")
    return "" if full else f" skip={settings['skippipe.skip']:g}"


def skippipe_db(tmp_path: Path, runs: dict[str, Any] = RUNS) -> Path:
    made = []
    for run_id, (over, iteration, _, source) in runs.items():
        settings = BASE | over
        simulated = settings["skippipe.mode"] == "simulate"
        made.append(
            fixtures._run(
                run_id, "skippipe", f"skippipe {run_id}{_skip(settings)}", strategy="skippipe",
                nproc=4,
                source=source, tps=2048 / iteration, jpt=0.5 * iteration,
                config=json.dumps({"workload": "skippipe", "settings": settings}),
                device_type="simulated:gcp12" if simulated else "cpu:test",
                energy_measured=not simulated,
            )
        )  # fmt: skip
    path = fixtures.make_db(tmp_path / "s.duckdb", made)
    con = duckdb.connect(str(path))  # the fixture's schema is version 1: no simulated column
    for column in ("visited_share", "useful_tokens_per_s", "joules_per_useful_token"):
        con.execute(f"ALTER TABLE results ADD COLUMN {column} DOUBLE")
    for run_id, (over, iteration, loss, _) in runs.items():
        share = 1.0 if over["skippipe.schedule"].startswith("full") else 0.5
        con.execute(
            "UPDATE results SET step_time_p50_s = ?, loss = ?, visited_share = ?, "
            "useful_tokens_per_s = tokens_per_s * ?, joules_per_useful_token = "
            "joules_per_token / ? WHERE run_id = ?",
            [iteration, loss, share, share, share, run_id],
        )
    con.close()
    return path


def test_every_schedule_is_paired_with_both_full_pipelines_per_straggler_condition(
    tmp_path: Path,
):
    table = read_runs(skippipe_db(tmp_path))
    assert set(table[table["is_simulated"]]["run_id"]) == {"simf", "sims"}
    paired = pairs(table[~table["is_simulated"]])
    got = {
        (r.condition, r.schedule): (round(r.gain, 9), round(r.aware_gain, 9))
        for r in paired.itertuples()
    }
    # without a straggler the plain full pipeline is the straggler-aware one's plan
    assert got[("no straggler", "skippipe")] == (1.6, 1.6)
    assert got[("slow=2×3", "skippipe")] == (2.0, 1.6)
    assert got[("slow=2×3", "random")] == (1.5, 1.2)
    assert got[("slow=2×3", "full-aware")] == (1.25, 1.0)
    assert set(paired["energy"]) == {"measured (rapl)"}


def test_runs_are_ranked_on_useful_tokens_and_gains_are_against_the_straggler_aware_baseline(
    tmp_path: Path,
):
    text = "\n".join(section(skippipe_db(tmp_path)))
    assert "## SkipPipe against full pipelines (measured)" in text
    assert "not on the leaderboard" in text
    rows = [line for line in text.splitlines() if line.startswith("| slow=2×3 |")]
    # ranked on J per useful token: a skipping run's J/token over its visited share (0.5)
    assert [r.split(" | ")[2] for r in rows] == [
        "full-aware", "skippipe skip=0.5", "full", "random skip=0.5"]  # fmt: skip
    assert rows[0].startswith("| slow=2×3 | 1 | full-aware | 1.000 | 2.4 | 1.00× | 853 | 853 |")
    # 1.6× the iterations, yet fewer useful tokens/s: each token ran half the blocks
    assert rows[1].startswith("| slow=2×3 | 2 | skippipe skip=0.5 | 0.500 | 1.5 | 1.60× ")
    assert "| 1,365 | 683 | 0.7407 | 1.481 | measured (rapl) | 5.1200 |" in rows[1]
    assert rows[2].split(" | ")[5] == "0.80×"  # the plain full pipeline is slower than it
    assert (
        "- straggler-aware full pipeline (slow=2×3): plain full ÷ it = 1.25×: what leaving the "
        "straggler out gains before any stage is skipped." in text
    )
    assert (
        "- skippipe skip=0.5 (slow=2×3): iteration-time gain against the straggler-aware full "
        "pipeline 1.60× (against the plain full pipeline 2.00×), each iteration training a "
        "visited share of 0.500 of the model; useful tokens/s against it 0.80×; loss 5.0000 "
        "straggler-aware full, 5.1200 skippipe" in text
    )
    assert "- skippipe skip=0.5, gain from visiting fewer stages (no straggler, where" in text
    routing = (
        "- skippipe skip=0.5, with the straggler (slow=2×3): of its 1.60× against the "
        "straggler-aware full pipeline, routing around the straggler 1.00× (= 1.60 ÷ 1.60)"
    )
    assert routing in text
    assert "- random skip=0.5: no gain without a straggler, so the gains cannot be split." in text
    assert "not the cost in convergence" in text and "benchmarks/skippipe_quality.py" in text


def test_simulated_runs_are_listed_apart_and_kept_off_the_leaderboard(tmp_path: Path):
    db = skippipe_db(tmp_path)
    text = "\n".join(section(db))
    simulated = text.split("## Simulated configurations (not measured)")[1]
    assert "Simulated, not measured." in simulated
    assert "| gcp12 | 4 | skippipe skip=0.34 | no straggler | 32.92 | 0.339 |" in simulated
    assert "simulated (model)" in simulated and "skip0" not in simulated
    measured = text.split("## Simulated")[0]
    assert "97.22" not in measured and "simulated (model)" not in measured
    board = summarise(query_results(db))  # skipping runs are ranked in their section only
    assert set(board["config_name"]) == {f"skippipe {r}" for r in ("full0", "full1", "aware1")}
    report = write_report(db, tmp_path / "r").read_text()
    leaderboard = report.split("## Leaderboard")[1].split("## ")[0]
    assert "simf" not in leaderboard and "sims" not in leaderboard
    assert "`skippipe skip0 skip=0.5`" in leaderboard.split("are not on this leaderboard")[1]
    assert "| skippipe skip0 skip=0.5 |" not in leaderboard
    workload = report.split("## Workload `skippipe`")[1]
    assert "simf" not in workload and "sims" not in workload
    assert "## Simulated configurations (not measured)" in report


def test_no_gain_without_a_full_pipeline_and_no_section_without_skippipe(tmp_path: Path):
    only = {k: v for k, v in RUNS.items() if k == "skip0"}
    text = "\n".join(section(skippipe_db(tmp_path, only)))
    assert "no gain can be given" in text and "Simulated" not in text
    other = fixtures.make_db(tmp_path / "o.duckdb", [fixtures._run("a", "hybrid", "dp2")])
    assert section(other) == []
