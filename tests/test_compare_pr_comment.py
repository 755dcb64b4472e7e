"""The energy check's pull-request comment (``greenbench.compare.pr_comment``) against a local
HTTP server that plays GitHub's REST API for issue comments (``github_helpers``): listed 100 a
page with ``Link`` headers, created, edited, and refused (403) where the token may not write.

The verdicts are real: ``greenbench compare`` on the seeded database, written as the energy
check writes them (Markdown and JSON files)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from github_helpers import NUMBER, REPO, TOKEN, WRITES, FakeGitHub, pull_request_event, serving

from greenbench.compare import compare_cli
from greenbench.compare.pr_comment import main, marker


@pytest.fixture
def github() -> Iterator[tuple[FakeGitHub, str]]:
    fake = FakeGitHub(others=150)
    with serving(fake) as api:
        yield fake, api


def verdict_files(db: Path, folder: Path, threshold: str) -> tuple[Path, Path, int]:
    """compare's Markdown and JSON verdicts of feature against main, as the check writes them
    (α = 0.25: three repeats a side reach p = 0.05 at best, 0.1 after Holm over two rows)."""
    folder.mkdir()
    files = []
    for fmt in ("markdown", "json"):
        out = io.StringIO()
        code = compare_cli(db, "main", "feature", threshold=threshold, alpha=0.25, fmt=fmt, out=out)
        path = folder / f"verdict.{'md' if fmt == 'markdown' else 'json'}"
        path.write_text(out.getvalue())
        files.append(path)
    return files[0], files[1], code


def event(tmp_path: Path, head_repo: str = REPO) -> Path:
    return pull_request_event(tmp_path / "event.json", head_repo)


def push(folder: Path, md: Path, js: Path, code: int, env: dict[str, str], *more: str) -> int:
    args = ["--markdown", str(md), "--verdict", str(js), "--exit-code", str(code)]
    args += ["--key", "bench/energy.toml", "--base", "a" * 40, "--head", "b" * 40, *more]
    return main(args, env | {"GITHUB_OUTPUT": str(folder / "output")})


def outputs(folder: Path) -> dict[str, str]:
    lines = (folder / "output").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)  # compare's Markdown appends to it


def environment(api: str, tmp_path: Path, **more: str) -> dict[str, str]:
    return {
        "GITHUB_API_URL": api, "GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPO,
        "GITHUB_SERVER_URL": "https://github.com", "GITHUB_RUN_ID": "42",
        "GITHUB_EVENT_PATH": str(event(tmp_path)),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    } | more  # fmt: skip


def test_the_first_push_comments_and_the_next_edits_that_comment(
    github: tuple[FakeGitHub, str], seeded_db: Path, tmp_path: Path
) -> None:
    fake, api = github
    fake.add(f"> {marker('bench/energy.toml')} quoted by a person")  # not ours: never edited
    env = environment(api, tmp_path)
    listing = f"/repos/{REPO}/issues/{NUMBER}/comments"

    md, js, code = verdict_files(seeded_db, tmp_path / "push1", "5%")
    assert code == 3  # the feature transformer spends ~10 % more J/token
    assert push(tmp_path / "push1", md, js, code, env) == 0
    ours = fake.ours()
    assert len(ours) == 1 and len(fake.comments) == 152
    first = ours[0]["body"]
    assert first.startswith("<!-- greenbench-energy-check: bench/energy.toml -->\n")
    assert "## greenbench energy check: regression" in first
    assert md.read_text().strip() in first  # compare's verdict table, as in the job summary
    assert f"[workflow run](https://github.com/{REPO}/actions/runs/42)" in first
    assert f"(https://github.com/{REPO}/commit/{'b' * 40})" in first
    # two pages listed (151 comments, 100 a page), then one comment created
    assert fake.requests == [("GET", listing), ("GET", listing), ("POST", listing)]
    assert outputs(tmp_path / "push1") == {
        "verdict": "regression", "exit-code": "3",
        "summary": json.loads(js.read_text())["summary"], "comment-url": ours[0]["html_url"],
    }  # fmt: skip

    fake.requests.clear()
    md, js, code = verdict_files(seeded_db, tmp_path / "push2", "50%")
    assert code == 0
    assert push(tmp_path / "push2", md, js, code, env) == 0
    assert fake.ours() == [ours[0]] and len(fake.comments) == 152  # the same one, edited
    second = ours[0]["body"]
    assert second != first and "REGRESSION" not in second
    outcome = json.loads(js.read_text())["outcome"]
    assert outcome in ("pass", "inconclusive") and f"energy check: {outcome}" in second
    comment_id = ours[0]["id"]
    assert fake.requests == [
        ("GET", listing), ("GET", listing), ("PATCH", f"/repos/{REPO}/issues/comments/{comment_id}")
    ]  # fmt: skip
    assert outputs(tmp_path / "push2")["verdict"] == outcome
    assert outputs(tmp_path / "push2")["comment-url"] == ours[0]["html_url"]
    assert fake.comments[150]["body"].startswith("> ")  # the person's comment untouched
    assert not (tmp_path / "summary.md").exists()  # nothing to say: it worked

    # another suite's check on the same pull request keeps a comment of its own
    assert push(tmp_path / "push2", md, js, code, env | {}, "--key", "bench/other.toml") == 0
    assert len(fake.ours()) == 2


def test_a_fork_s_pull_request_sends_nothing_that_writes_and_says_so(
    github: tuple[FakeGitHub, str], seeded_db: Path, tmp_path: Path
) -> None:
    fake, api = github
    env = environment(api, tmp_path)
    env["GITHUB_EVENT_PATH"] = str(event(tmp_path, head_repo="someone/model"))
    md, js, code = verdict_files(seeded_db, tmp_path / "push", "5%")
    assert push(tmp_path / "push", md, js, code, env) == 0
    assert not [r for r in fake.requests if r[0] in WRITES] and fake.ours() == []
    summary = (tmp_path / "summary.md").read_text()
    assert "comes from a fork (someone/model)" in summary
    assert outputs(tmp_path / "push") | {"summary": ""} == {
        "verdict": "regression", "exit-code": "3", "summary": "", "comment-url": "",
    }  # fmt: skip


def test_a_token_that_may_not_write_is_said_in_the_summary_never_a_failure(
    github: tuple[FakeGitHub, str], seeded_db: Path, tmp_path: Path
) -> None:
    fake, api = github
    fake.refuse_writes = True
    md, js, code = verdict_files(seeded_db, tmp_path / "push", "5%")
    assert push(tmp_path / "push", md, js, code, environment(api, tmp_path)) == 0
    assert fake.ours() == [] and fake.requests[-1][0] == "POST"
    summary = (tmp_path / "summary.md").read_text()
    assert "GitHub answered 403" in summary and "pull-requests: write" in summary
    assert outputs(tmp_path / "push")["comment-url"] == ""
    assert outputs(tmp_path / "push")["verdict"] == "regression"


def test_no_pull_request_no_comment_and_an_error_is_a_verdict(
    github: tuple[FakeGitHub, str], tmp_path: Path
) -> None:
    fake, api = github
    folder = tmp_path / "push"
    folder.mkdir()
    md, errors = folder / "verdict.md", folder / "compare.err"
    md.write_text("")
    errors.write_text("error: baseline 'base' names no runs\n")
    env = environment(api, tmp_path)
    args = ["--markdown", str(md), "--verdict", str(folder / "missing.json"), "--exit-code", "2"]
    args += ["--errors", str(errors), "--key", "bench/energy.toml"]
    # a push to a branch: outputs, no request
    push_event = tmp_path / "push.json"
    push_event.write_text(json.dumps({"ref": "refs/heads/main"}))
    assert main(args, env | {"GITHUB_EVENT_PATH": str(push_event),
                             "GITHUB_OUTPUT": str(folder / "output")}) == 0  # fmt: skip
    assert fake.requests == [] and outputs(folder)["verdict"] == "error"
    assert outputs(folder)["exit-code"] == "2"
    # on a pull request, the comment says compare could not judge, and why
    assert main(args, env | {"GITHUB_OUTPUT": str(folder / "output2")}) == 0
    (ours,) = fake.ours()
    assert "could not judge (exit 2)" in ours["body"] and "names no runs" in ours["body"]


def test_the_module_runs_as_a_command(tmp_path: Path) -> None:
    md = tmp_path / "verdict.md"
    md.write_text("### greenbench compare: no regression\n")
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"outcome": "pass", "summary": "no regression"}))
    done = subprocess.run(
        [sys.executable, "-m", "greenbench.compare.pr_comment", "--markdown", str(md),
         "--verdict", str(verdict), "--exit-code", "0"],
        env={"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(tmp_path / "output"),
             "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert outputs(tmp_path) == {
        "verdict": "pass",
        "exit-code": "0",
        "summary": "no regression",
        "comment-url": "",
    }
