"""The ``ckpt`` and ``fault`` sections' checks: every bad setting is one line, exit 2, and
nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.errors import SpecError
from greenbench.spec import expand

BASE = ["run", "--workload", "transformer-vs-mamba", "--device", "cpu",
        "--set", "model.family=transformer", "--set", "repeats=1"]  # fmt: skip
DDP = ["--set", "strategy=ddp", "--set", "nproc=2"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "ckpt.every=0"], "ckpt.every=0: checkpoint every N >= 1 measured steps"),
        (["--set", "ckpt.every=-3"], "ckpt.every=-3"),
        ([*DDP, "--set", "fault.kill_rank=2@1"], "rank 2 is beyond the run's 2 ranks"),
        (
            [*DDP, "--set", "train.steps=4", "--set", "fault.kill_rank=1@4"],
            "step 4 is beyond the run's 4 measured steps",
        ),
        ([*DDP, "--set", "fault.kill_rank=one@two"], "write RANK@STEP"),
        ([*DDP, "--set", "ckpt.every=2", "--set", "repeats=3"], "one repeat (run.repeats=1"),
        (
            [*DDP, "--set", "ckpt.every=2", "--set", "ddp.compress=powersgd"],
            "keep state outside the model and optimizer",
        ),
        (
            [*DDP, "--set", "ckpt.every=2", "--set", "train.until=target"],
            "a run to a target is not checkpointed",
        ),
    ],
)
def test_a_bad_fault_setting_is_one_line_exit_2(tmp_path: Path, args, message):
    db = tmp_path / "r.duckdb"
    result = CliRunner().invoke(main, [*BASE, *args, "--db", str(db)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and message in line, line
    assert not db.exists()


def test_a_kill_or_checkpoints_count_in_the_identity_and_the_name():
    (plain,) = expand("transformer-vs-mamba", [{"model.family": "transformer"}])[:1]
    (killed,) = expand(
        "transformer-vs-mamba",
        [
            {
                **{"model.family": "transformer", "strategy": "ddp", "nproc": 2, "repeats": 1},
                **{"ckpt.every": 2, "ckpt.mode": "async", "fault.kill_rank": "1@1"},
                "ckpt.dir": "/tmp/x",
            }
        ],
    )[:1]
    assert killed.name.endswith("ddp×2 ckpt/2 async kill=1@1")
    from greenbench.settings import spec_identity

    identity = spec_identity(killed)
    assert identity["ckpt.every"] == 2 and identity["fault.kill_rank"] == "1@1"
    assert "ckpt.dir" not in identity and "fault.max_restarts" not in identity
    assert not any(k.startswith(("ckpt.", "fault.")) for k in spec_identity(plain))


def test_skippipe_kills_are_not_checkpointed_runs():
    with pytest.raises(SpecError, match="not strategy=skippipe"):
        expand("skippipe", [{"skippipe.stages": "1-2-1", "ckpt.every": 2}])
