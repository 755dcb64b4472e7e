"""`greenbench run --executor …` from the command line, on this machine, which has no SLURM:
the dry run prints what sbatch would get and writes nothing; without it, a missing sbatch or
submitit is one line and exit 2, nothing written; options that need a cluster are refused
without one."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest
from click.testing import CliRunner

from greenbench.cli import main

POSTTRAIN_ON_TWO_NODES = [
    *("run", "--suite", "posttrain", "--executor", "slurm"),
    *("--nodes", "2", "--gpus-per-node", "4", "--partition", "gpu", "--account", "proj"),
]


def invoke(args: list[str], db: Path) -> object:
    return CliRunner().invoke(main, [*args, "--db", str(db)])


def written(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_dry_run_prints_the_sbatch_parameters_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    result = invoke([*POSTTRAIN_ON_TWO_NODES, "--dry-run"], db)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for line in (
        "#SBATCH --nodes=2", "#SBATCH --gpus-per-node=4", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --partition=gpu", "#SBATCH --account=proj", "#SBATCH --time=60",
        "#SBATCH --exclusive",
    ):  # fmt: skip
        assert line in out.splitlines(), line
    assert out.startswith("dry run: 27 configuration(s) as 27 job(s) in 1 SLURM job array(s)")
    assert "#SBATCH --array=0-26%27" in out  # one array: every job asks the same
    assert "transformer/125m seq=8192 fixed single×1" in out  # the suite's GPU sizes
    # and the plan: each configuration's job, its time unknown where the cluster never ran it
    assert "plan: 27 configuration(s) on the cluster" in out
    assert "unknown: not run on the cluster before" in out
    assert "each limited to 60 min" in " ".join(out.split())
    assert written(tmp_path) == []


def test_dry_run_without_a_request_asks_each_configuration_what_it_needs(tmp_path: Path) -> None:
    result = invoke(
        ["run", "--suite", "posttrain", "--executor", "slurm", "--dry-run"], tmp_path / "g.duckdb"
    )
    assert result.exit_code == 0, result.output
    assert (
        "#SBATCH --gpus-per-node=1" in result.stdout
        and "#SBATCH --gpus-per-node=4" in result.stdout
    )
    assert "#SBATCH --nodes=2" not in result.stdout
    assert written(tmp_path) == []


def test_without_sbatch_one_line_exit_2_nothing_written(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("submitit")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = invoke(POSTTRAIN_ON_TWO_NODES, tmp_path / "g.duckdb")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: --executor slurm needs SLURM's sbatch, which is not on PATH here: submit from a "
        "node of the cluster (its login node), or add --dry-run to see what would be submitted"
    ]
    assert written(tmp_path) == []


def test_without_submitit_one_line_exit_2_nothing_written(tmp_path: Path, monkeypatch) -> None:
    real_import = builtins.__import__

    def no_submitit(name: str, *args: object, **kwargs: object) -> object:
        if name == "submitit" or name.startswith("submitit."):
            raise ImportError("No module named 'submitit'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_submitit)
    for executor in ("slurm", "submitit-local"):
        result = invoke(
            ["run", "--workload", "data-parallel", "--executor", executor], tmp_path / "g.duckdb"
        )
        assert result.exit_code == 2
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(
            f"error: --executor {executor} needs submitit, which is not installed"
        )
    assert written(tmp_path) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--partition", "gpu"], "--partition goes with a cluster executor"),
        (["--cluster", "qos=high"], "--cluster goes with a cluster executor"),
        (["--executor", "submitit-local", "--dry-run"], "use it with --executor slurm"),
        (["--executor", "submitit-local", "--no-wait"], "--no-wait needs a cluster's scheduler"),
        (["--executor", "slurm", "--dry-run", "--cluster", "qos"], "--cluster expects KEY=VALUE"),
        (["--executor", "slurm", "--dry-run", "--cluster", "gpus=2"], "unknown cluster key 'gpus'"),
        (
            ["--executor", "slurm", "--node-rank", "0", "--rdzv-endpoint", "h:1"],
            "the job's allocation gives them",
        ),
        (
            [
                "--executor",
                "slurm",
                "--dry-run",
                "--gpus-per-node",
                "1",
                "--set",
                "strategy=ddp",
                "--nproc",
                "2",
            ],
            "none of the 2 configurations fits the request",
        ),
    ],
)
def test_what_needs_a_cluster_or_cannot_fit_is_refused(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = invoke(["run", "--workload", "data-parallel", *args], tmp_path / "g.duckdb")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert message in line
    assert written(tmp_path) == []
