"""greenbench.hardware.git: the commit and branch a run is stored with, in a real (temporary)
git repository: on a branch, on a detached HEAD as CI checkouts are (the branch then comes
from the CI's variables), and outside any checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from greenbench.hardware import git

CI_VARIABLES = {"GITHUB_HEAD_REF": "", "GITHUB_REF_NAME": "", "CI_COMMIT_REF_NAME": ""}


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo)]
    return subprocess.run([*command, *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with two commits, on branch ``feature/x``."""
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "one")
    _git(tmp_path, "checkout", "-q", "-b", "feature/x")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "two")
    return tmp_path


def test_a_branch_checkout_names_its_branch_whatever_the_ci_says(repo: Path) -> None:
    ci = CI_VARIABLES | {"GITHUB_REF_NAME": "7/merge", "CI_COMMIT_REF_NAME": "other"}
    assert git.branch(repo, ci) == "feature/x"
    assert git.head_sha(repo) == _git(repo, "rev-parse", "HEAD").strip()


def test_a_detached_head_takes_the_branch_the_ci_names(repo: Path) -> None:
    _git(repo, "checkout", "-q", "--detach", "HEAD~1")
    assert git.head_sha(repo) == _git(repo, "rev-parse", "main").strip()
    assert git.branch(repo, CI_VARIABLES) is None  # no CI: unknown, never "HEAD"
    assert git.branch(repo, {}) is None
    # GitHub outside a pull request: GITHUB_HEAD_REF is set but empty
    github_push = CI_VARIABLES | {"GITHUB_REF_NAME": "main"}
    assert git.branch(repo, github_push) == "main"
    # a pull request: its source branch, not the merge ref
    github_pr = CI_VARIABLES | {"GITHUB_HEAD_REF": "fix/energy", "GITHUB_REF_NAME": "12/merge"}
    assert git.branch(repo, github_pr) == "fix/energy"
    assert git.branch(repo, CI_VARIABLES | {"CI_COMMIT_REF_NAME": "gitlab-branch"}) == (
        "gitlab-branch"
    )


def test_a_detached_head_reads_the_process_environment(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _git(repo, "checkout", "-q", "--detach")
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CI_COMMIT_REF_NAME", "nightly")
    assert git.branch(repo) == "nightly"


def test_outside_a_checkout_there_is_no_commit_and_no_branch(tmp_path: Path) -> None:
    ci = CI_VARIABLES | {"GITHUB_REF_NAME": "main", "CI_COMMIT_REF_NAME": "main"}
    assert git.branch(tmp_path, ci) is None
    assert git.head_sha(tmp_path) is None


def test_without_git_there_is_no_commit_and_no_branch(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(repo))  # no git executable on it
    assert git.branch(repo, CI_VARIABLES | {"GITHUB_REF_NAME": "main"}) is None
    assert git.head_sha(repo) is None
