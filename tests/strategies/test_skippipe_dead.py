"""A SkipPipe node really killed (``fault.kill_rank``): four real gloo ranks launched by the
survivors' spawner, the victim SIGKILLed mid-run, the survivors regrouping and finishing; the
failure stored as the run's events. And the plans that skip a stage whose every node is gone.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import QUICK

from greenbench.cli import main
from greenbench.launcher.launch import run_specs
from greenbench.spec import expand
from greenbench.store import check_integrity, read_frame
from greenbench.strategies.skippipe.routes import Costs, make_plan

COSTS = Costs(
    layers_per_stage=2, forward_flops_per_sample_layer=4e8, data_node_flops_per_sample=1.3e8,
    activation_bytes_per_sample=1 << 18, samples_per_microbatch=1, latency_ms=10.0,
    bandwidth_gbps=1.0, slowdown={},
)  # fmt: skip


@pytest.mark.parametrize("schedule", ["full", "full-aware", "skippipe", "random"])
def test_a_stage_with_every_node_removed_is_skipped_by_every_path(schedule: str):
    plan = make_plan(
        (1, 1, 1, 1), microbatches=4, skip=0.0 if schedule.startswith("full") else 0.5,
        schedule=schedule, seed=0, removed={2}, costs=COSTS,
    )  # fmt: skip
    assert plan.stage_nodes == ((0,), (1,), (), (3,))  # the stage stays, with no node
    assert 2 not in plan.order and all(2 not in path for path in plan.paths)
    assert all(path for path in plan.paths)  # every microbatch still runs blocks
    if schedule.startswith("full"):
        assert all(path == (1, 3) for path in plan.paths)  # every stage that is left
    # the blocks of the skipped stage are never run: visited share below 1
    assert plan.visited_share({0: 0, 1: 1, 2: 1, 3: 1}, 3, [1] * 4) <= 2 / 3


def spec(**over: object):
    # detect_s: long enough that no live peer's wait reaches it on a busy machine (a wait that
    # does, with no death behind it, fails the run), short enough to keep the test quick
    settings = {
        **QUICK, "strategy": "skippipe", "nproc": 4, "data.global_batch": 4,
        "train.steps": 4, "fault.detect_s": 8.0, "timeout_s": 600.0,
        **{k.replace("__", "."): v for k, v in over.items()},
    }  # fmt: skip
    return expand("transformer-vs-mamba", [settings])[0]


def stored(db):
    runs = read_frame(db, "SELECT run_id, status, error, warnings, config_name FROM runs")
    events = read_frame(
        db,
        "SELECT kind, step, rank, t_s, seconds, joules, tokens, note FROM run_events ORDER BY seq",
    )
    return runs, events


@pytest.mark.slow
def test_the_stragglers_replica_killed_mid_run_is_routed_around_and_the_run_finishes(tmp_path):
    db = tmp_path / "r.duckdb"
    run = spec(
        skippipe__stages="1-2-1", skippipe__schedule="full", emulate__slow_nodes="2",
        emulate__slowdown=2.0, fault__kill_rank="2@1",
    )  # fmt: skip
    assert "kill=2@1" in run.name
    summary = run_specs([run], db)
    runs, events = stored(db)
    assert summary.statuses == ["ok"], runs.error[0]
    assert "rank 2 was killed at measured step 1" in runs.warnings[0]
    kinds = list(events.kind)
    assert kinds[0] == "failure" and kinds[-1] == "rerouted"
    assert events["rank"][0] == 2 and events.step[0] == 1
    detected = events[events.kind == "detected"]
    assert sorted(detected["rank"]) == [0, 1, 3]  # every survivor noticed
    assert all(s >= 0 for s in detected.seconds)
    rerouted = events.iloc[-1]
    assert "serve nodes 0,1,3" in rerouted.note  # the later plans leave the dead node out
    assert 2 <= rerouted.step <= 3  # step 1 was lost (the victim died in it)
    # the iterations affected cost their seconds at the survivors' mean power (an estimate)
    assert rerouted.joules > 0 and "joules: an estimate" in rerouted.note
    ranks = read_frame(db, "SELECT DISTINCT rank FROM rank_results ORDER BY rank")
    assert list(ranks["rank"]) == [0, 1, 3]  # the survivors' results, no others
    assert check_integrity(db) == []


@pytest.mark.slow
def test_killing_the_only_node_of_a_stage_skips_that_stage(tmp_path):
    db = tmp_path / "r.duckdb"
    run = spec(
        skippipe__stages="1-1-1-1", skippipe__schedule="full", fault__kill_rank="2@1",
        model__size="tiny",
    )  # fmt: skip
    summary = run_specs([run], db)
    runs, events = stored(db)
    assert summary.statuses == ["ok"], runs.error[0]
    rerouted = events[events.kind == "rerouted"].iloc[0]
    assert "serve nodes 0,1,3" in rerouted.note
    assert "stage 2 (layers" in rerouted.note and "lost its only node" in rerouted.note
    assert "lost its only node" in runs.warnings[0]
    share = read_frame(db, "SELECT visited_share FROM results").visited_share[0]
    assert share < 1.0  # the later iterations ran without that stage's blocks


@pytest.mark.parametrize(
    "kill, why",
    [
        ("0@1", "is a data node"),
        ("4@1", "beyond the run's 4 ranks"),
        ("2@9", "beyond the run's 4 measured steps"),
    ],
)
def test_a_kill_the_survivors_cannot_carry_on_from_is_refused_in_one_line(tmp_path, kill, why):
    db = tmp_path / "r.duckdb"
    sets = ["strategy=skippipe", "nproc=4", "train.steps=4", f"fault.kill_rank={kill}"]
    args = ["run", "--workload", "transformer-vs-mamba", "--device", "cpu", "--db", str(db)]
    result = CliRunner().invoke(main, [*args, *(a for s in sets for a in ("--set", s))])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()  # one line
    assert line.startswith("error: ") and why in line
    assert not db.exists()


def test_faults_json_without_a_kill_record_makes_a_warning_not_events(tmp_path):
    from greenbench.launcher.survivors import FAULTS, fault_events

    (tmp_path / FAULTS).write_text(
        json.dumps({"kill": None, "gone": {}, "t0": None, "detected": [], "rerouted": None})
    )
    events, warnings = fault_events(spec(fault__kill_rank="2@1"), tmp_path, [])
    assert events == [] and "was not killed" in warnings[0]
