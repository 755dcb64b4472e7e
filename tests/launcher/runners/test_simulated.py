"""Simulated SkipPipe runs (``skippipe.mode=simulate``): stored through `greenbench run` with no
worker, labelled simulated with modelled energy, never on the leaderboard."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.errors import SpecError
from greenbench.launcher.runners import simulated, torchrun
from greenbench.planner.skippipe.simulator import simulate_energy
from greenbench.reporting.leaderboard import leaderboard
from greenbench.reporting.refs import query_results
from greenbench.settings import spec_identity, spec_key
from greenbench.spec import expand
from greenbench.store import config_key

PUBLISHED = [
    "--set", "skippipe.network=gcp12", "--set", "skippipe.stages=5-3-3-3-3-3",
    "--set", "skippipe.skip=0.34",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _no_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulated run launches no worker, calibrates no CPU peak and samples no idle power."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a simulated run must not measure anything")

    for name in ("execute", "peak_flops_for", "why_it_cannot_fit"):
        monkeypatch.setattr(torchrun, name, refuse)
    monkeypatch.setattr(torchrun.IdlePower, "get", refuse)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, ["run", "--workload", "skippipe", *args])


def spec(**over: Any) -> Any:
    settings = {"skippipe.mode": "simulate", "skippipe.schedule": "skippipe",
                "emulate.slow_nodes": "", "repeats": 1, **over}  # fmt: skip
    [one] = expand("skippipe", [settings])
    return one


def rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_simulated_run_is_stored_labelled_and_kept_off_the_leaderboard(tmp_path: Path):
    db = tmp_path / "s.duckdb"
    result = invoke("--set", "skippipe.mode=simulate", "--set", "repeats=1", "--db", str(db))
    assert result.exit_code == 0, result.output
    runs = rows(
        db,
        "SELECT status, simulated, energy_source, energy_measured, device_type, nproc, "
        "config_name FROM runs",
    )
    # the workload's sweep: {full, full-aware, random, skippipe} × {no straggler, straggler}
    assert len(runs) == 8
    for status, sim, source, measured, device, nodes, name in runs:
        assert (status, sim, source, measured) == ("ok", True, "model", False)
        assert device == "simulated:local" and nodes == 4 and "simulated local" in name
    results = rows(
        db,
        "SELECT energy_source, energy_measured, joules_per_token, loss, mfu, flops, "
        "peak_mem_bytes, energy_note FROM results",
    )
    assert len(results) == 8
    for source, measured, jpt, loss, mfu, flops, memory, note in results:
        assert (source, measured) == ("model", False) and jpt > 0
        assert loss is None and mfu is None and flops is None and memory is None  # never 0
        assert "assumed watts, not measured" in note
    assert "simulated (model)" in result.output
    stored = query_results(db)
    assert len(stored) == 8 and leaderboard(stored).empty  # simulated: never on the leaderboard
    report = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "r"), "--db", str(db)])
    assert report.exit_code == 0, report.output
    text = (tmp_path / "r" / "README.md").read_text()
    assert "## Simulated configurations (not measured)" in text and "## Leaderboard" not in text


def test_gcp12_needs_the_published_stages_one_line_exit_2_nothing_written(tmp_path: Path):
    db = tmp_path / "s.duckdb"
    result = invoke(
        "--set", "skippipe.mode=simulate", "--set", "skippipe.network=gcp12", "--db", str(db)
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "skippipe.stages=5-3-3-3-3-3" in lines[0]
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "skippipe.network=gcp12"], "simulated only"),
        (["--set", "skippipe.mode=simulate", "--energy-source", "rapl"], "reads no meter"),
        (["--energy-source", "model"], "'model' is not one of"),
        (["--set", "energy.source=model"], "is not one of"),
    ],
)
def test_settings_a_simulated_run_refuses(tmp_path: Path, args: list[str], message: str):
    db = tmp_path / "s.duckdb"
    result = invoke(*args, "--db", str(db))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not db.exists()


def simulate_published(tmp_path: Path, schedules: str) -> Path:
    """A database holding one simulated repeat of each of ``schedules`` on the published gcp12
    setup (no slow node)."""
    db = tmp_path / "g.duckdb"
    result = invoke(
        "--set", "skippipe.mode=simulate", *PUBLISHED, "--set", f"skippipe.schedule={schedules}",
        "--set", "emulate.slow_nodes=", "--set", "repeats=1", "--db", str(db),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return db


def test_the_published_topology_stores_skippipe_below_the_full_pipeline(tmp_path: Path):
    db = simulate_published(tmp_path, "full,skippipe")
    stored = dict(
        rows(
            db,
            "SELECT json_extract_string(r.config, '$.settings.\"skippipe.schedule\"'), "
            "x.step_time_p50_s FROM runs r JOIN results x USING (run_id)",
        )
    )
    assert stored["skippipe"] < stored["full"]
    # docs/skippipe.md: 32.92 s against 97.22 s at 30 microbatches (SkipPipe published 33.31 s)
    assert stored["skippipe"] == pytest.approx(32.92, abs=0.05)
    assert stored["full"] == pytest.approx(97.22, abs=0.05)
    nodes, model, seq = rows(db, "SELECT DISTINCT nproc, model_size, seq_len FROM runs")[0]
    assert (nodes, model, seq) == (20, "published", 1024)


def test_gcp12_stores_the_simulated_networks_six_stages_not_the_default_ranks(tmp_path: Path):
    # the layout was the spec's default nproc=4 resolved (pp4), though 20 nodes in 6 stages ran
    db = simulate_published(tmp_path, "skippipe")
    [stored] = rows(
        db, "SELECT layout, dp_replicate, dp_shard, tp, pp, cp, nproc, nnodes FROM runs"
    )
    assert stored == ("dpr1-dps1-tp1-pp6-cp1", 1, 1, 1, 6, 1, 20, 1)
    local = simulated.record_fields(spec())  # the local network: the runner's own layout
    assert "layout" not in local and local["nproc"] == 4


def test_a_local_simulation_accounts_tokens_time_and_modelled_energy():
    one = spec(**{"train.steps": 3, "repeats": 2, "skippipe.schedule": "full"})
    out = simulated.simulate_run(one, carbon_g_per_kwh=None)
    steps = simulated.iterations(one)
    iteration = steps[0].result.iteration_s
    first, second = (x.to_dict() for x in out.repeats)
    assert {**first, "repeat": 1} == second  # deterministic: every repeat the same
    r = out.repeats[0]
    assert r.tokens == 8 * 1 * 256 * 3  # microbatches × samples × seq_len × steps
    assert r.seconds == pytest.approx(3 * iteration)
    assert r.step_times_s == (iteration,) * 3 and r.step_time_p50_s == pytest.approx(iteration)
    energy = simulate_energy(steps[0].result, simulated.ASSUMED_BUSY_W, simulated.ASSUMED_IDLE_W)
    assert r.energy_j == pytest.approx(3 * energy.joules)
    assert r.energy_net_j == pytest.approx(3 * energy.joules - 4 * 70.0 * r.seconds)
    assert (r.energy_source, r.energy_measured) == ("model", False)
    ranks = [x for x in out.ranks if x.repeat == 0]
    assert [x.rank for x in ranks] == [0, 1, 2, 3]
    for x in ranks:
        assert x.compute_s + x.wait_s == pytest.approx(x.seconds) and x.comm_s == 0
    assert sum(x.tokens for x in ranks) == r.tokens and ranks[0].tokens == r.tokens


def test_the_simulated_plan_is_the_runners_own():
    """On local, the simulator follows the runner's plan: a full pipeline's data node works in
    fill-drain order and the two stage-1 replicas take microbatches in turn."""
    [it] = simulated.iterations(spec(**{"train.steps": 1, "skippipe.schedule": "full"}))
    assert it.ranks == (0, 1, 2, 3) and it.result.node_microbatches == (8, 4, 4, 8)
    first = sorted((iv for iv in it.result.intervals if iv.node == 0), key=lambda iv: iv.start_s)
    assert [iv.phase for iv in first] == ["F"] * 8 + ["L"] * 8 + ["B"] * 8


def test_a_straggler_slows_the_full_pipeline_more_than_skippipe():
    def iteration(**over: Any) -> float:
        return simulated.iterations(spec(**{"train.steps": 1, **over}))[0].result.iteration_s

    full, skip = iteration(**{"skippipe.schedule": "full"}), iteration()
    full_slow = iteration(**{"skippipe.schedule": "full", "emulate.slow_nodes": "2"})
    skip_slow = iteration(**{"emulate.slow_nodes": "2"})
    assert skip < full and skip_slow < full_slow
    assert full_slow / skip_slow > full / skip  # routing around the straggler gains more


def test_the_straggler_aware_full_pipeline_leaves_the_straggler_idle_and_skips_nothing():
    def run(**over: Any) -> Any:
        return simulated.iterations(spec(**{"train.steps": 1, "emulate.slow_nodes": "2", **over}))

    [aware] = run(**{"skippipe.schedule": "full-aware"})
    [plain] = run(**{"skippipe.schedule": "full"})
    assert aware.result.node_microbatches == (8, 8, 0, 8) and aware.share == 1.0
    assert aware.result.iteration_s < plain.result.iteration_s
    [skip] = run()
    assert skip.share == 0.5  # each microbatch through one of the two stages of 2 blocks
    out = simulated.simulate_run(spec(**{"train.steps": 2}), carbon_g_per_kwh=None)
    r = out.repeats[0]
    assert r.visited_share == 0.5 and r.useful_tokens == r.tokens / 2
    assert r.useful_flops is None  # no model ran: unknown, like its FLOPs


def test_the_published_straggler_aware_full_pipeline_leaves_slow_nodes_out():
    published = {"skippipe.mode": "simulate", "skippipe.network": "gcp12",
                 "skippipe.stages": "5-3-3-3-3-3", "emulate.slow_nodes": "6",
                 "emulate.slowdown": 3.0, "train.steps": 1}  # fmt: skip
    [aware] = simulated.iterations(spec(**published, **{"skippipe.schedule": "full-aware"}))
    [plain] = simulated.iterations(spec(**published, **{"skippipe.schedule": "full"}))
    assert aware.result.node_microbatches[6] == 0 < plain.result.node_microbatches[6]
    assert aware.share == plain.share == 1.0


def test_a_node_that_stops_serving_gets_no_work_from_its_step():
    one = spec(**{"train.steps": 3, "train.warmup_steps": 0, "skippipe.fail_node": 2,
                  "skippipe.fail_step": 1})  # fmt: skip
    steps = simulated.iterations(one)
    assert 2 in steps[0].ranks and all(2 not in it.ranks for it in steps[1:])
    out = simulated.simulate_run(one, carbon_g_per_kwh=None)
    node = next(x for x in out.ranks if x.rank == 2)
    assert node.compute_s == pytest.approx(steps[0].result.busy_s[2])
    assert node.wait_s == pytest.approx(node.seconds - node.compute_s)


def test_the_network_is_part_of_a_simulated_identity_only():
    real = spec(**{"skippipe.mode": "real"})
    assert "skippipe.network" not in spec_identity(real)
    assert spec_key(real) == config_key(
        {k: v for k, v in spec_identity(real).items() if k != "skippipe.network"}
    )
    local, published = spec(), spec(**{
        "skippipe.network": "gcp12", "skippipe.stages": "5-3-3-3-3-3", "skippipe.skip": 0.34,
    })  # fmt: skip
    assert spec_identity(local)["skippipe.network"] == "local"
    assert spec_key(local) != spec_key(published)
    [other] = expand("transformer-vs-mamba", [{"model.family": "transformer",
                                               "data.seq_len": 256}])  # fmt: skip
    assert not any(k.startswith("skippipe.") for k in spec_identity(other))


def test_gcp12_refuses_a_failing_node_and_slow_nodes_beyond_its_twenty():
    base = {"skippipe.network": "gcp12", "skippipe.stages": "5-3-3-3-3-3"}
    with pytest.raises(SpecError, match="not simulated"):
        spec(**base, **{"skippipe.fail_node": 7})
    with pytest.raises(SpecError, match="below 20"):
        spec(**base, **{"emulate.slow_nodes": "20"})
    assert spec(**base, **{"emulate.slow_nodes": "19"})["emulate.slow_nodes"] == "19"


def test_a_simulated_run_keeps_its_settings_in_its_config(tmp_path: Path):
    db = tmp_path / "s.duckdb"
    result = invoke(
        "--set", "skippipe.mode=simulate", "--set", "skippipe.schedule=full",
        "--set", "emulate.slow_nodes=", "--set", "repeats=1", "--db", str(db),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [(config, quota, device)] = rows(db, "SELECT config, rank_cpu_quota, device FROM runs")
    settings = json.loads(config)["settings"]
    assert settings["skippipe.mode"] == "simulate" and settings["skippipe.network"] == "local"
    # no ranks: nothing of this machine's (its cores, a GPU) enters the identity
    assert settings["emulate.rank_cpu_quota"] == "off" and quota is False
    assert settings["device"] == device == "cpu"
    [(wait,)] = rows(db, "SELECT wait_fraction FROM results")
    assert 0 < wait < 1 and not math.isnan(wait)
