"""The SLURM executor through submitit's real SlurmExecutor, with SLURM faked at its boundary:
``sbatch`` (keeps the script it is given, answers a job id), ``sacct`` (answers the states the
test sets) and ``srun`` (present, as submitit checks) are scripts on PATH. What the job would do
on its node is done by the test with the job's own writer (ShardStore) and submitit's record
of a result. Checks: the submission (one array with the planned #SBATCH lines, the manifest),
`greenbench status` collecting ended jobs (a timed-out one's runs interrupted with the
scheduler's state, a completed one's merged) and leaving live ones, `--resume` leaving out what
a live job holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import QUICK

from greenbench.cli import main
from greenbench.cluster.manifest import load_manifests
from greenbench.launcher.runners.record import spec_record
from greenbench.results import RunOutcome
from greenbench.settings.runspec import RunSpec
from greenbench.store import list_runs
from greenbench.store.shard_writer import ShardStore

submitit_utils = pytest.importorskip("submitit.core.utils")

FAKES = {
    "sbatch": 'cp "$1" "$FAKE_SLURM/submitted.sh"\necho "Submitted batch job 4242"\n',
    "sacct": 'cat "$FAKE_SLURM/sacct.txt"\n',
    "srun": "exit 0\n",
}


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the fake SLURM commands (first on PATH) and their files."""
    folder = tmp_path / "slurm"
    folder.mkdir()
    for name, body in FAKES.items():
        script = folder / name
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(folder))
    return folder


def set_states(slurm: Path, states: dict[str, str]) -> None:
    lines = ["JobID|State|NodeList"] + [f"{j}|{s}|node-1" for j, s in states.items()]
    (slurm / "sacct.txt").write_text("\n".join(lines) + "\n")


def run(*args: str) -> object:
    return CliRunner().invoke(main, list(args))


def test_submit_then_status_collects_what_the_scheduler_says_ended(
    slurm: Path, tmp_path: Path
) -> None:
    db = tmp_path / "g.duckdb"
    sets = [f"{k}={v}" for k, v in QUICK.items() if k != "device"]
    args = ["run", "--workload", "transformer-vs-mamba", "--set", "data.seq_len=32,48",
            *[a for s in sets if not s.startswith("data.seq_len") for a in ("--set", s)],
            "--executor", "slurm", "--partition", "gpu", "--db", str(db)]  # fmt: skip
    set_states(slurm, {})
    submitted = run(*args, "--no-wait")
    assert submitted.exit_code == 0, submitted.output
    assert "submitted job(s) 4242_0, 4242_1" in submitted.stderr
    script = (slurm / "submitted.sh").read_text()
    for line in ("#SBATCH --array=0-1%2", "#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --nodes=1", "#SBATCH --exclusive"):  # fmt: skip
        assert line in script.splitlines(), line
    (manifest,), _ = load_manifests(db)
    assert [j.job_id for j in manifest.jobs] == ["4242_0", "4242_1"]
    assert not db.exists()  # nothing stored yet: the database is made when results arrive

    # still queued: nothing collected, exit 3; --resume leaves out what a live job holds
    set_states(slurm, {"4242_0": "PENDING", "4242_1": "RUNNING"})
    pending = run("status", "--db", str(db))
    assert pending.exit_code == 3 and "2 open" in pending.stdout
    again = run(*args, "--resume", "--no-wait")
    assert again.exit_code == 0
    assert again.stderr.count("still holds it") == 2
    assert "every configuration is stored ok or held by a live job" in again.stderr

    # on the node: job 0 ran its configuration and ended; job 1 began its own and timed out
    job0, job1 = manifest.jobs
    writer = ShardStore(db)
    for job in (job0, job1):
        spec = RunSpec.from_dict(job.specs[0])
        node = {"device_type": "NVIDIA H100 80GB HBM3", "kernels": "{}", "host": "gpu-node-3"}
        writer.begin_run(spec_record(spec, job.run_ids[0]).row() | node)
    writer.finish_run(job0.run_ids[0], RunOutcome(status="ok"))
    result0 = submitit_utils.JobPaths(manifest.folder / "%j", job_id="4242_0").result_pickle
    result0.parent.mkdir(parents=True, exist_ok=True)
    submitit_utils.cloudpickle_dump(("success", []), result0)
    set_states(slurm, {"4242_0": "COMPLETED", "4242_1": "TIMEOUT"})

    over = run("status", "--db", str(db))
    assert over.exit_code == 0, over.output
    runs = list_runs(db, limit=None).set_index("run_id")
    assert runs.loc[job0.run_ids[0]].status == "ok"
    timed_out = runs.loc[job1.run_ids[0]]
    assert timed_out.status == "interrupted" and timed_out.host == "gpu-node-3"
    assert timed_out.error.startswith("job 4242_1 TIMEOUT without a result")
    assert "2 over" in over.stdout and "1 interrupted, 1 ok" in over.stdout
    assert run("status", "--db", str(db)).exit_code == 0  # collected once: nothing more to do
    assert len(list_runs(db, limit=None)) == 2

    # --resume submits the interrupted configuration again, alone
    resumed = run(*args, "--resume", "--no-wait")
    assert resumed.exit_code == 0, resumed.output
    assert "1 configuration(s) in 1 job(s)" in resumed.stderr
    script = (slurm / "submitted.sh").read_text()  # one job: submitit submits it as no array
    assert "#SBATCH --array" not in script and "#SBATCH --partition=gpu" in script
    manifests, _ = load_manifests(db)
    assert [(j.job_id, j.names) for j in manifests[-1].jobs] == [("4242", job1.names)]
    assert json.loads((manifests[-1].folder / "manifest.json").read_text())["executor"] == "slurm"


def test_a_submission_sbatch_refuses_is_one_line_and_leaves_nothing(
    slurm: Path, tmp_path: Path
) -> None:
    (slurm / "sbatch").write_text(
        "#!/bin/sh\necho 'sbatch: error: invalid partition specified: gpux' >&2\nexit 1\n"
    )
    db = tmp_path / "g.duckdb"
    result = run("run", "--workload", "data-parallel", "--executor", "slurm",
                 "--partition", "gpux", "--db", str(db))  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: submitting to slurm failed: sbatch: error: invalid partition specified: gpux"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slurm"]  # no database, no records
