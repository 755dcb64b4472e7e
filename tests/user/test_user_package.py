"""A user's own package, built outside the greenbench tree: its workload runs by entry point and,
registered under the ``greenbench.workloads`` entry-point group, shows in ``list workloads`` and
runs from a suite file by its registered name (here on two ranks under DDP). Runs name the entry
point in their identity and the package's version in their stored versions, not in their
identity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.settings import identity_of, spec_key
from greenbench.spec import expand
from greenbench.vocabulary import config_key

BENCH = """
    import torch
    from greenbench import Batch, Workload

    def build(ctx):
        width = ctx.settings["width"]
        return torch.nn.Sequential(torch.nn.Embedding(64, width), torch.nn.Linear(width, 64))

    def batch(ctx, step):
        g = torch.Generator().manual_seed(ctx.seed * 10_000 + step * 10 + ctx.rank)
        tokens = torch.randint(64, (4, 33), generator=g)
        return Batch(data=tokens, tokens=4 * 32)

    def loss(model, tokens):
        logits = model(tokens[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    def workload():
        return Workload(name="toy", question="What does a toy step cost?", build_model=build,
                        batch=batch, loss=loss, settings={"width": 16}, seq_len=32)
"""
PYPROJECT = """
    [build-system]
    requires = ["setuptools>=68"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "gbtoy"
    version = "0.3.1"

    [project.entry-points."greenbench.workloads"]
    gbtoy = "gbtoy.bench:workload"

    [tool.setuptools]
    packages = ["gbtoy"]
"""
QUICK = [
    *("--set", "train.warmup_steps=1", "--set", "train.steps=2"),
    *("--set", "train.min_window_s=0.2", "--set", "energy.idle_s=0", "--repeats", "1"),
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The package built and installed (pip, no index) into a folder on the import path of this
    process and of the workers it starts."""
    root = tmp_path_factory.mktemp("user-package")
    source = root / "src"
    (source / "gbtoy").mkdir(parents=True)
    (source / "gbtoy" / "__init__.py").write_text("")
    (source / "gbtoy" / "bench.py").write_text(textwrap.dedent(BENCH))
    (source / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    site = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--target", str(site), str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        mp.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        )
        yield site


def runs(db: Path) -> list[dict]:
    with duckdb.connect(str(db), read_only=True) as con:
        cur = con.execute("SELECT * FROM runs ORDER BY started_at")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def test_registered_workloads_are_listed(installed: Path):
    result = CliRunner().invoke(main, ["list", "workloads"])
    assert result.exit_code == 0, result.output
    assert "gbtoy" in result.output and "gbtoy.bench:workload" in result.output
    assert "0.3.1" in result.output and "What does a toy step cost?" in result.output
    # the registered name and the entry point are one configuration
    by_name = [spec_key(s) for s in expand("gbtoy", [])]
    assert by_name == [spec_key(s) for s in expand("gbtoy.bench:workload", [])]


@pytest.mark.slow
def test_a_user_package_runs_by_entry_point_and_from_a_suite(installed: Path, tmp_path: Path):
    db = tmp_path / "r.duckdb"
    ref = "gbtoy.bench:workload"
    result = CliRunner().invoke(
        main, ["run", "--workload", ref, "--set", "user.width=8", *QUICK, "--db", str(db)]
    )
    assert result.exit_code == 0, result.output
    suite = tmp_path / "toy.toml"
    suite.write_text(
        '[[entries]]\nworkload = "gbtoy"\nset = { "user.width" = 8, strategy = "ddp", nproc = 2 }\n'
    )
    result = CliRunner().invoke(main, ["run", "--suite", str(suite), *QUICK, "--db", str(db)])
    assert result.exit_code == 0, result.output

    single, ddp = runs(db)
    for run in (single, ddp):
        assert run["status"] == "ok", run["error"]
        assert run["workload"] == ref and run["model_family"] == "user"
        assert run["model_size"] == "toy" and run["seq_len"] == 32
        config = json.loads(run["config"])
        assert config["workload"] == ref and config["settings"]["user.width"] == 8
        assert "0.3.1" not in run["config"]  # the version is no part of the identity …
        versions = json.loads(run["versions"])["workload"]  # … it is stored beside it
        assert versions == versions | {"entry_point": ref, "package": "gbtoy", "version": "0.3.1"}
    settings = json.loads(single["config"])["settings"]
    assert single["config_key"] == config_key(identity_of(settings, ref))  # the entry point's name
    assert (single["strategy"], single["nproc"], ddp["strategy"], ddp["nproc"]) == (
        "single",
        1,
        "ddp",
        2,
    )
    with duckdb.connect(str(db), read_only=True) as con:
        notes = con.execute("SELECT DISTINCT mfu_note FROM results").fetchall()
        ranks = con.execute(
            "SELECT count(*) FROM rank_results WHERE run_id = ?", [ddp["run_id"]]
        ).fetchone()[0]
    assert all("counted with torch FlopCounterMode" in n for (n,) in notes)
    assert ranks == 2
