"""End to end: the CI recipe for a repository that is not greenbench
(``actions/energy-check/energy-check.sh``, the steps the composite action runs) on a throwaway
git repository holding the example user package (``examples/tinylm``).

One repository, three commits: the package; a commit that changes nothing the benchmark runs
(a note in the README); a commit that plants a slowdown in the model's forward (a quarter
second of redundant matrix products, several times the step it slows, so each token costs more
time and, under the load-based estimate, more joules). Base → the unchanged commit exits 0 (two
interleaved rounds); unchanged → slowed exits 3, with the verdict in the job summary. Both see
6 or 5 repeats a side, enough for a regression to be significant; a 25 % threshold keeps a
shared 2-core machine's drift out of it, and the planted slowdown is several times larger.

The slowed pull request runs as on GitHub, against a local server playing GitHub's REST API
(``github_helpers``): its verdict goes to one pull-request comment and to the step's outputs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from github_helpers import REPO, TOKEN, FakeGitHub, pull_request_event, serving

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "actions" / "energy-check" / "energy-check.sh"
EXAMPLE = ROOT / "examples" / "tinylm"
SLOWDOWN = """        end = time.perf_counter() + 0.25  # planted: redundant work, ~7× the step
        while time.perf_counter() < end:
            torch.tanh(h.detach() @ h.detach().transpose(1, 2))
        return self.head(h)"""
#: both sides alike: two DDP ranks of one thread each (two threads of one rank on a shared 2-core
#: machine spin at every parallel region, and their step times spread over 40×), short windows
QUICK = (
    "--nproc 2 --set strategy=ddp --set train.steps=1 --set train.warmup_steps=1 "
    "--set train.min_window_s=0.3"
)
GIT = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=os.environ | GIT)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    git(repo, "init", "--quiet")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "tinylm")
    (repo / "README.md").write_text("tinylm, measured by greenbench\n")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "a note")
    model = repo / "tinylm" / "model.py"
    text = model.read_text()
    assert "        return self.head(h)" in text
    text = text.replace("        return self.head(h)", SLOWDOWN)
    model.write_text(text.replace("import torch\n", "import time\n\nimport torch\n", 1))
    git(repo, "commit", "--quiet", "-am", "slower")
    return repo


def recipe(repo: Path, work: Path, base: str, head: str, **env: str) -> subprocess.CompletedProcess:
    settings = {
        "SUITE": "energy.toml",
        "THRESHOLD": "25%",
        # these runs share a busy test machine on purpose (interleaving and a 25 % threshold
        # answer that), so runs stored contended are judged rather than called inconclusive
        "ALLOW_CONTENDED": "1",
        "INSTALL": "no",
        "PYTHON": sys.executable,
        "WORK": str(work),
        "SUMMARY": str(work / "summary.md"),
        # never the GitHub of a CI running these tests: no comment, no outputs, unless given
        "COMMENT": "no",
        "GITHUB_EVENT_PATH": "",
        "GITHUB_OUTPUT": "",
    }
    return subprocess.run(
        ["bash", str(SCRIPT), base, head],
        cwd=repo,
        env=os.environ | settings | env,
        capture_output=True,
        text=True,
        timeout=400,
    )


@pytest.mark.slow
def test_the_recipe_passes_an_unchanged_step_and_fails_a_slower_one(repo: Path, tmp_path: Path):
    # each commit's package installed (pip --target, offline), as the recipe does by default
    same = recipe(
        repo, tmp_path / "same", "HEAD~2", "HEAD~1", INSTALL="auto",
        PIP_ARGS="--no-build-isolation --no-index", ROUNDS="2", RUN_ARGS=f"--repeats 3 {QUICK}",
    )  # fmt: skip
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-3000:]
    assert "REGRESSION" not in same.stdout
    with duckdb.connect(str(tmp_path / "same" / "energy.duckdb"), read_only=True) as con:
        stored = con.execute("SELECT DISTINCT label, versions->'$.workload' FROM runs").fetchall()
    assert {label for label, _ in stored} == {"base", "head"}
    assert all(json.loads(w)["package"] == "greenbench-example-tinylm" for _, w in stored)
    rounds = [line for line in same.stdout.splitlines() if line.startswith("::group::")]
    assert [line.rsplit(" ", 1)[1] for line in rounds] == ["base", "head", "head", "base"]

    github = FakeGitHub()
    with serving(github) as api:
        slow = recipe(
            repo, tmp_path / "slow", "HEAD~1", "HEAD",
            ROUNDS="1", RUN_ARGS=f"--repeats 5 {QUICK}",
            COMMENT="auto", GITHUB_API_URL=api, GITHUB_TOKEN=TOKEN, GITHUB_REPOSITORY=REPO,
            GITHUB_EVENT_PATH=str(pull_request_event(tmp_path / "event.json")),
            GITHUB_OUTPUT=str(tmp_path / "output"),
        )  # fmt: skip
    assert slow.returncode == 3, slow.stdout[-3000:] + slow.stderr[-3000:]
    summary = (tmp_path / "slow" / "summary.md").read_text()
    assert "REGRESSION" in summary and "joules_per_token" in summary
    assert summary.count("### greenbench compare:") == 1  # once, not also by compare itself
    (comment,) = github.ours()  # the verdict table, on the pull request
    assert comment["body"].startswith("<!-- greenbench-energy-check: energy.toml -->")
    assert "REGRESSION" in comment["body"] and "joules_per_token" in comment["body"]
    lines = (tmp_path / "output").read_text().splitlines()
    outputs = dict(line.split("=", 1) for line in lines)
    assert outputs["verdict"] == "regression" and outputs["exit-code"] == "3"
    assert outputs["comment-url"] == comment["html_url"]
    # the worktrees are gone, the repository is as it was
    listed = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True)
    assert len(listed.stdout.strip().splitlines()) == 1
