"""The cluster path for real, without SLURM: configurations as jobs of submitit's local
executor (real subprocesses: submitit's controller, its job process, the job's ranks). Jobs
write shards and never the database; `greenbench merge` brings every table in once; a job
killed mid-way is stored failed with the scheduler's reason and `--resume` reruns it alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import QUICK

from greenbench.cluster.executors import job_state
from greenbench.cluster.manifest import load_manifests
from greenbench.cluster.options import ClusterOptions
from greenbench.cluster.submit import submit, submit_planned
from greenbench.spec import expand
from greenbench.store import list_runs, pending_shards, read_frame

TABLES = ("runs", "results", "rank_results", "comm_records")


def greenbench(*args: str) -> list[str]:
    return [sys.executable, "-c", "from greenbench.cli import main; main()", *args]


def counts(db: Path) -> dict[str, int]:
    return {t: int(read_frame(db, f"SELECT count(*) AS n FROM {t}").n[0]) for t in TABLES}


@pytest.mark.slow
def test_jobs_write_shards_and_merge_brings_every_table_in_once(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    specs = expand(
        "data-parallel",
        [QUICK | {"strategy": "ddp", "nproc": 2, "data.lengths": ["fixed", "longalign"]}],
        label="cluster",
    )
    manifest = submit(specs, db, executor="submitit-local", options=ClusterOptions(),
                      python_path=[])  # fmt: skip
    assert manifest is not None and len(manifest.jobs) == 2
    assert all(job.state == "planned" for job in manifest.jobs)  # local jobs wait their turn
    submit_planned(manifest, manifest.jobs)  # both at once here: two real subprocesses
    deadline = time.monotonic() + 300
    while any(
        job_state(manifest.executor, manifest.folder, job.job_id) == "RUNNING"
        for job in manifest.jobs
    ):
        assert time.monotonic() < deadline, "local jobs did not end"
        time.sleep(0.5)
    run_ids = sorted(r for job in manifest.jobs for r in job.run_ids)
    shards = pending_shards(db)
    assert [p.stem for p in shards] == run_ids  # every run in a shard of its own...
    assert not db.exists()  # ...and no database: the jobs never open it

    merged = subprocess.run(greenbench("merge", "--db", str(db)), capture_output=True, text=True)
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout.count("merged shard") == 2
    once = counts(db)
    assert once == {
        "runs": 2,
        "results": 2,
        "rank_results": 4,
        "comm_records": once["comm_records"],
    }
    assert once["comm_records"] > 0  # DDP's all-reduces, recorded by both ranks
    runs = list_runs(db, limit=None)
    assert set(runs.status) == {"ok"} and set(runs.label) == {"cluster"}
    assert set(runs.run_id) == set(run_ids)

    again = subprocess.run(greenbench("merge", "--db", str(db)), capture_output=True, text=True)
    assert again.returncode == 0 and "no shards to merge" in again.stdout
    assert counts(db) == once


SUITE = """
description = "two quick configurations"
[defaults]
{defaults}
[[entries]]
workload = "transformer-vs-mamba"
set = {{ "model.family" = "transformer", "data.seq_len" = [32, 48] }}
"""


def wait_for_note(db: Path, name_part: str, proc: subprocess.Popen, timeout_s: float) -> dict:
    """The row of the begun-run note whose configuration name holds ``name_part``."""
    folder = db.with_name(db.name + ".shards")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for note in folder.glob(".*.begun.json") if folder.is_dir() else []:
            try:
                row = json.loads(note.read_text())
            except (OSError, ValueError):
                continue
            if name_part in row["config_name"]:
                return row
        time.sleep(0.05)
    raise AssertionError(f"no job began {name_part!r}")


def kill_job_process(db: Path) -> str:
    """SIGKILL the job process of the running local job (its ranks die with it); its id."""
    (manifest,), _ = load_manifests(db)
    (job,) = [j for j in manifest.jobs if j.state == "submitted"]
    controller = psutil.Process(int(job.job_id))
    (task,) = controller.children()
    os.kill(task.pid, signal.SIGKILL)
    return job.job_id


@pytest.mark.slow
def test_a_killed_job_is_stored_failed_and_resume_reruns_it_alone(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    suite = tmp_path / "two.toml"
    defaults = "\n".join(f'"{k}" = {json.dumps(v)}' for k, v in QUICK.items())
    suite.write_text(SUITE.format(defaults=defaults))
    args = ("run", "--suite", str(suite), "--executor", "submitit-local", "--db", str(db))
    proc = subprocess.Popen(greenbench(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        wait_for_note(db, "seq=48", proc, timeout_s=240)
        job_id = kill_job_process(db)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err  # a configuration did not finish ok
    runs = list_runs(db, limit=None).set_index("config_name")
    assert len(runs) == 2
    ok, killed = (
        runs.loc["transformer/tiny seq=32 fixed single×1"],
        runs.filter(like="seq=48", axis=0).iloc[0],
    )
    assert ok.status == "ok"
    assert killed.status == "failed"
    assert killed.error.startswith(f"job {job_id} FINISHED without a result")
    assert "1/2 configurations ok" in err

    again = subprocess.run(greenbench(*args, "--resume"), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "skipped transformer/tiny seq=32 fixed single×1: already stored ok" in again.stderr
    assert "1 configuration(s) in 1 job(s)" in again.stderr
    runs = list_runs(db, limit=None)
    assert len(runs) == 3
    seq48 = runs[runs.config_name.str.contains("seq=48")]
    assert sorted(seq48.status) == ["failed", "ok"]
    assert (runs.config_name.str.contains("seq=32")).sum() == 1  # not run again
    assert pending_shards(db) == []


ONE_LONG = """
description = "one configuration long enough to be stopped"
[defaults]
{defaults}
[[entries]]
workload = "transformer-vs-mamba"
set = {{ "model.family" = "transformer", "train.steps" = 100000, "train.max_steps" = 100000 }}
"""


def wait_for_worker(db: Path, proc: subprocess.Popen, timeout_s: float) -> str:
    """The id of the running local job once its run's worker process has started."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        manifests, _ = load_manifests(db)
        jobs = [j for m in manifests for j in m.jobs if j.state == "submitted"]
        try:
            tree = psutil.Process(int(jobs[0].job_id)).children(recursive=True) if jobs else []
            if any("greenbench.rank.worker" in p.cmdline() for p in tree):
                return jobs[0].job_id
        except psutil.Error:
            pass
        time.sleep(0.1)
    raise AssertionError("the job's worker did not start")


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGTERM to greenbench", "Ctrl-C to its process group"])
def test_a_stopped_submission_stores_its_run_interrupted_without_a_traceback(
    tmp_path: Path, stop: str
) -> None:
    """The job is stopped, not its controller (submitit's process between greenbench and the
    job, which would print a traceback and SIGKILL the job a second later): the job stores
    its run interrupted itself and the controller ends with it, saying nothing."""
    db = tmp_path / "g.duckdb"
    suite = tmp_path / "long.toml"
    defaults = "\n".join(f'"{k}" = {json.dumps(v)}' for k, v in QUICK.items() if k != "train.steps")
    suite.write_text(ONE_LONG.format(defaults=defaults))
    args = ("run", "--suite", str(suite), "--executor", "submitit-local", "--db", str(db))
    proc = subprocess.Popen(greenbench(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        job_id = wait_for_worker(db, proc, timeout_s=240)
        if stop == "SIGTERM to greenbench":
            proc.send_signal(signal.SIGTERM)
        else:  # as a terminal's Ctrl-C: to every process of the foreground group
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    lines = err.splitlines()
    assert not [line for line in lines if line.startswith(("Traceback", "KeyboardInterrupt"))], err
    assert "interrupted: 0 configuration(s) not run (--resume runs them)" in err
    (run,) = list_runs(db, limit=None).itertuples()
    assert (run.status, run.error) == ("interrupted", "interrupted by the user (SIGINT/SIGTERM)")
    (manifest,), _ = load_manifests(db)
    controller_log = manifest.folder / job_id / f"{job_id}_controller.log"
    assert "Traceback" not in controller_log.read_text()
