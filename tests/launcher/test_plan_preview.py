"""`greenbench run --dry-run` on one machine: every configuration, those skipped and why, an
estimate each (this machine's stored runs, or the model) and in total; nothing run, nothing
written, refusals as the run refuses them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.hardware.machine import no_gpu_driver
from greenbench.launcher import durations
from greenbench.launcher.launch import finished_configs
from greenbench.launcher.plan_preview import RUNS, SKIPPED, local_plan
from greenbench.launcher.preflight import need_of
from greenbench.launcher.resolve import resolve_spec
from greenbench.launcher.runners.record import spec_record
from greenbench.results import RunOutcome
from greenbench.spec import expand
from greenbench.store import Store, read_frame
from tests.launcher.test_progress import repeat_result

#: two tiny configurations of one workload (sequence lengths 32 and 64), on the CPU
TWO = [
    *("--workload", "transformer-vs-mamba", "--set", "device=cpu"),
    *(
        "--set",
        "model.family=transformer",
        "--set",
        "data.seq_len=32,64",
        "--set",
        "data.global_batch=2",
        "--set",
        "repeats=1",
    ),
]


def resolved(**settings: Any) -> list[Any]:
    """Tiny Transformer configurations on the CPU, resolved as a dry run resolves them."""
    base = {"device": "cpu", "model.family": "transformer", "data.global_batch": 2, "repeats": 1}
    specs = expand("transformer-vs-mamba", [base | settings])
    return [resolve_spec(spec, measure=False) for spec in specs]


def dry_run(*args: str) -> Any:
    return CliRunner().invoke(main, ["run", *args, "--dry-run"])


def flat(text: str) -> str:
    """Rich's table cells wrap; words are compared on one line."""
    return " ".join(text.replace("│", " ").split())


def store_run(db: Path, spec: Any, wall_s: float, *, host: str | None = None) -> str:
    """An ok run of ``spec`` stored as the launcher stores one, ``wall_s`` seconds long, on
    this machine (its fingerprint's host, CPU model and cores) or on ``host``."""
    name, cpu, cores = durations.this_machine()
    run_id = f"{abs(hash((host, wall_s, spec.name))) % 16**12:012x}"
    finished = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    record = dataclasses.replace(
        spec_record(spec, run_id),
        host=host or name,
        hardware=json.dumps({"cpu_model": cpu, "logical_cores": cores}),
        device_type="cpu:test",
        started_at=finished - dt.timedelta(seconds=wall_s),
    )
    with Store(db) as store:
        store.begin_run(record.row())
        store.finish_run(run_id, RunOutcome(status="ok", repeats=[repeat_result(0, 100.0, 0.5)]))
    return run_id


def test_every_configuration_its_estimate_and_the_total_nothing_written(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    result = dry_run(*TWO, "--db", str(db))
    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    assert "transformer/tiny seq=32 fixed single×1" in out
    assert "transformer/tiny seq=64 fixed single×1" in out
    assert out.count("estimate (model)") == 2  # no stored run here: the model, and it says so
    assert "total: ~" in out and "for 2 configuration(s) that run" in out
    assert "nothing was run and nothing written" in out
    assert not db.exists()  # no database created
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_configuration_needing_more_devices_is_skipped_with_its_reason(tmp_path: Path) -> None:
    result = dry_run(
        *("--workload", "data-parallel", "--set", "device=cpu", "--set", "strategy=ddp"),
        *("--set", "data.lengths=fixed"),
        *("--set", "nproc=2,8", "--set", "data.global_batch=8", "--set", "data.micro_batch=1"),
        *("--devices", "2", "--db", str(tmp_path / "g.duckdb")),
    )
    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    assert "ddp×2" in out and "ddp×8" in out
    assert "skipped" in out and "needs 8 device(s) per node, 2 device(s) lent (--devices)" in out
    assert "for 1 configuration(s) that run" in out and "1 skipped" in out
    # --force runs it anyway: then nothing is skipped
    forced = dry_run(
        *("--workload", "data-parallel", "--set", "device=cpu", "--set", "strategy=ddp"),
        *("--set", "data.lengths=fixed"),
        *("--set", "nproc=2,8", "--set", "data.global_batch=8", "--set", "data.micro_batch=1"),
        *("--devices", "2", "--force", "--db", str(tmp_path / "g.duckdb")),
    )
    assert forced.exit_code == 0, forced.output
    assert "for 2 configuration(s) that run" in flat(forced.stdout)


def test_stored_runs_of_this_machine_give_the_estimate(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    specs = resolved(**{"data.seq_len": [32, 64]})
    store_run(db, specs[0], 42.0)
    store_run(db, specs[0], 44.0)
    store_run(db, specs[1], 4000.0, host="another-machine")  # not this machine: not used
    before = db.read_bytes()
    plan = local_plan(specs, db)
    first, second = (row.estimate for row in plan.rows)
    assert first is not None and second is not None
    assert (first.source, first.label) == (durations.STORED, "from 2 stored runs")
    mine = read_frame(
        db,
        "SELECT epoch(finished_at) - epoch(started_at) AS s FROM runs"
        " WHERE host <> 'another-machine'",
    ).s  # 42 and 44 s, and the moment writing each took
    assert first.seconds == pytest.approx(mine.median())  # the median of this machine's two
    assert second.source == durations.MODEL  # the other machine's run says nothing here
    assert second.seconds is not None and second.seconds < 4000
    assert db.read_bytes() == before  # read only
    out = flat(dry_run(*TWO, "--db", str(db)).stdout)
    assert f"~{durations.clock(first.seconds)}" in out
    assert "from 2 stored runs" in out and "1 from stored runs" in out


def test_resume_shows_what_is_stored_as_skipped(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    specs = resolved(**{"data.seq_len": [32, 64]})
    store_run(db, specs[1], 30.0)
    assert len(finished_configs(db)) == 1
    plan = local_plan(specs, db, resume=True)
    assert [row.plan for row in plan.rows] == [RUNS, SKIPPED]
    assert "--resume" in plan.rows[1].why
    assert plan.rows[1].estimate is None
    out = flat(dry_run(*TWO, "--resume", "--db", str(db)).stdout)
    assert "already stored ok" in out and "1 skipped" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "no.such=1"], "no.such"),
        (["--set", "model.size=7b"], "needs at least"),  # one configuration that cannot fit
        (["--nnodes", "2"], "cannot share equally"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, args: list[str], message: str
) -> None:
    db = tmp_path / "g.duckdb"
    result = dry_run(
        "--workload", "transformer-vs-mamba", "--set", "device=cpu", *args, "--db", str(db)
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert result.stdout == "" and not db.exists()


@pytest.mark.skipif(not no_gpu_driver(), reason="a GPU driver is installed: torch must say")
def test_a_dry_run_imports_no_torch_and_starts_no_process(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys\n"
        "popen = subprocess.Popen\n"
        "def no_process(args, *a, **k):\n"
        "    if list(args)[:1] == ['uname']:  # Python's platform module naming the OS\n"
        "        return popen(args, *a, **k)\n"
        "    raise AssertionError(f'a dry run started a process: {args}')\n"
        "subprocess.Popen = no_process\n"
        "from greenbench.cli import main\n"
        "try:\n"
        "    main(['run', '--suite', 'posttrain', '--dry-run', '--db', sys.argv[1]])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "g.duckdb")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "27 configuration(s)" in done.stdout
    assert not (tmp_path / "g.duckdb").exists()


def test_the_model_uses_this_machine_s_measured_rate_and_start_up() -> None:
    (spec,) = resolved(**{
        "data.seq_len": 64, "repeats": 2, "train.warmup_steps": 2, "train.steps": 3,
        "train.min_window_s": 0.0,
    })  # fmt: skip
    n = need_of(spec)
    step_flops = n.flops_per_token * n.tokens_per_step
    stored = {
        "run_id": "a", "config_key": "other", "seed_group": None, "device": "cpu",
        "model_family": "transformer", "nproc": 1, "nnodes": 1, "simulated": False,
        "config": {"settings": {"train.warmup_steps": 1, "train.min_window_s": 0.0}},
        "wall_s": 20.0, "n_repeats": 2, "window_s": 8.0, "flops": 8 * step_flops,
        "step_p50_s": 1.0,
    }  # fmt: skip
    history = durations.History([stored])
    estimate = durations.estimate_one(spec, history, peak=None)
    # 1 FLOP/step per second: a step of 1 s; start-up 20 - 8 - 1 × 1 = 11 s; 2 + 2 × 3 steps
    assert estimate.source == durations.MODEL
    assert estimate.seconds == pytest.approx(11.0 + 8 * 1.0)
    assert "measured" in estimate.how and "assumed" not in estimate.how
    # without stored runs: the peak at the assumed share, and the assumed start-up, said so
    share = durations.ASSUMED_SHARE_OF_PEAK["cpu"]
    bare = durations.estimate_one(spec, durations.History(), peak=step_flops / share)
    assert bare.seconds == pytest.approx(durations.ASSUMED_STARTUP_S["cpu"] + 8 * 1.0)
    assert bare.how.count("assumed") == 2
    # no calibration cached yet: an assumed peak, said so
    fresh = durations.estimate_one(spec, durations.History(), peak=None)
    assert fresh.source == durations.MODEL and "an assumed" in fresh.how


def test_the_eta_scales_what_is_left_by_what_finished() -> None:
    eta = durations.Eta({0: 10.0, 1: 20.0, 2: 30.0})
    assert eta.left(0, 4.0) == (6.0, 56.0)
    eta.finish(0, 20.0)  # took twice its estimate: the rest is scaled by 2
    assert eta.scale == 2.0
    assert eta.left(1, 5.0) == (35.0, 95.0)
    assert eta.left(1, 50.0) == (0.0, 60.0)  # over its estimate: nothing left of it, never < 0
    unknown = durations.Eta({0: 10.0, 1: None})
    assert unknown.left(0, 0.0) == (10.0, None)


def test_clock() -> None:
    assert [durations.clock(s) for s in (4.4, 99, 200, 7260)] == [
        "4 s", "99 s", "3 min 20 s", "2 h 01 min"
    ]  # fmt: skip
