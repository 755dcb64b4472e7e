"""greenbench.reporting.skippipe: real SkipPipe runs paired with the full pipeline, the gains
split into fewer stages and routing around a straggler, simulated runs listed apart."""

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


def skippipe_db(tmp_path: Path, runs: dict[str, Any] = RUNS) -> Path:
    made = []
    for run_id, (over, iteration, _, source) in runs.items():
        settings = BASE | over
        simulated = settings["skippipe.mode"] == "simulate"
        made.append(
            fixtures._run(
                run_id, "skippipe", f"skippipe {run_id}", strategy="skippipe", nproc=4,
                source=source, tps=2048 / iteration, jpt=0.5 * iteration,
                config=json.dumps({"workload": "skippipe", "settings": settings}),
                device_type="simulated:gcp12" if simulated else "cpu:test",
                energy_measured=not simulated,
            )
        )  # fmt: skip
    path = fixtures.make_db(tmp_path / "s.duckdb", made)
    con = duckdb.connect(str(path))  # the fixture's schema is version 1: no simulated column
    for run_id, (_, iteration, loss, _) in runs.items():
        con.execute(
            "UPDATE results SET step_time_p50_s = ?, loss = ? WHERE run_id = ?",
            [iteration, loss, run_id],
        )
    con.close()
    return path


def test_full_and_skippipe_are_paired_per_straggler_condition(tmp_path: Path):
    table = read_runs(skippipe_db(tmp_path))
    assert set(table[table["is_simulated"]]["run_id"]) == {"simf", "sims"}
    paired = pairs(table[~table["is_simulated"]])
    gains = dict(zip(paired["condition"], paired["gain"], strict=True))
    assert gains == {"no straggler": 1.6, "slow=2×3": 2.0}
    assert set(paired["energy"]) == {"measured (rapl)"}


def test_the_gains_are_split_into_fewer_stages_and_routing(tmp_path: Path):
    text = "\n".join(section(skippipe_db(tmp_path)))
    assert "## SkipPipe against a full pipeline (measured)" in text
    row = next(line for line in text.splitlines() if line.startswith("| no straggler"))
    assert row.startswith("| no straggler | skippipe skip=0.5 | 2 → 1.25 | 1.60× | 1,024 → 1,638 |")
    assert row.endswith("(measured (rapl)) | 5.0000 → 5.1000 |")  # J/token: the fixture's noise
    assert "gain from visiting fewer stages (no straggler): full ÷ skipping = 1.60×" in text
    assert "with the straggler (slow=2×3): gain 2.00×; of it, routing around the straggler" in text
    assert "1.25× (= 2.00 ÷ 1.60; loss 5.0100 full, 5.1200 skipping)" in text
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
    board = summarise(query_results(db))
    assert set(board["config_name"]) == {f"skippipe {r}" for r in ("full0", "skip0", "full1",
                                                                    "skip1")}  # fmt: skip
    report = write_report(db, tmp_path / "r").read_text()
    leaderboard = report.split("## Leaderboard")[1].split("## ")[0]
    assert "simf" not in leaderboard and "sims" not in leaderboard and "skip0" in leaderboard
    workload = report.split("## Workload `skippipe`")[1]
    assert "simf" not in workload and "sims" not in workload
    assert "## Simulated configurations (not measured)" in report


def test_no_gain_without_a_full_pipeline_and_no_section_without_skippipe(tmp_path: Path):
    only = {k: v for k, v in RUNS.items() if k == "skip0"}
    text = "\n".join(section(skippipe_db(tmp_path, only)))
    assert "no gain can be given" in text and "Simulated" not in text
    other = fixtures.make_db(tmp_path / "o.duckdb", [fixtures._run("a", "hybrid", "dp2")])
    assert section(other) == []
