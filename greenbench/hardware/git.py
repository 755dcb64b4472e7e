"""Which code a run ran: the git commit and branch of the checkout it was started in.

Stored with every run (``runs.git_sha``, ``runs.git_branch``) so that history can be drawn per
commit and per branch. Outside a checkout (or without git) both are None. A checkout on a
branch names it; a detached HEAD names none, as CI checkouts are: there the branch the CI says
it built is taken from the environment (`CI_BRANCH_VARIABLES`, the first one set and not
empty), and where none is set the branch stays unknown (None), never "HEAD".
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

#: where CI services say which branch a detached checkout built, tried in order: GitHub's pull
#: request source branch (empty outside pull requests), GitHub's branch or tag name (a pull
#: request's is ``N/merge``), GitLab's branch or tag name
CI_BRANCH_VARIABLES = ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME")

_NOT_A_BRANCH = 1  # `git symbolic-ref --quiet`'s exit status when HEAD is detached


def _git(cwd: Path | None, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=5, cwd=cwd, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None


def head_sha(cwd: Path | None = None) -> str | None:
    """The commit checked out in ``cwd`` (default: the current directory); None outside a
    checkout, in one without commits, or without git."""
    done = _git(cwd, "rev-parse", "--verify", "--quiet", "HEAD")
    if done is None or done.returncode != 0:
        return None
    return done.stdout.strip() or None


def branch(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The branch checked out in ``cwd`` (default: the current directory): HEAD's branch; for
    a detached HEAD the branch the CI names (`CI_BRANCH_VARIABLES`, read from ``environ``,
    default ``os.environ``), else None; None outside a checkout or without git."""
    done = _git(cwd, "symbolic-ref", "--quiet", "--short", "HEAD")
    if done is None:
        return None
    if done.returncode == 0:
        return done.stdout.strip() or None
    if done.returncode != _NOT_A_BRANCH:  # not a checkout (git says so with status 128)
        return None
    env = os.environ if environ is None else environ
    for name in CI_BRANCH_VARIABLES:
        value = env.get(name, "").strip()
        if value:
            return value
    return None
