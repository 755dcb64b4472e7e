"""The energy check's verdict on its pull request: one comment, updated on each new push, and the
verdict as the action's outputs.

``actions/energy-check`` (``energy-check.sh``) runs ``python -m greenbench.compare.pr_comment``
after ``greenbench compare``, with the Markdown and JSON verdicts it wrote. This module:

- writes the step's outputs to ``$GITHUB_OUTPUT`` (where set): ``verdict`` (`Verdict.outcome`:
  ``pass``, ``regression``, ``inconclusive``, ``unstable``; ``error`` when compare could not
  judge), ``exit-code`` (compare's), ``summary`` (its one-line summary) and ``comment-url``
  (empty when no comment was written);
- on a pull request (``$GITHUB_EVENT_PATH``'s payload has one) posts the verdict table as a
  comment that begins with a hidden marker, ``<!-- greenbench-energy-check: KEY -->`` (KEY the
  suite, so two checks of one pull request keep a comment each), or, when a comment with that
  marker exists (the PR's comments listed page by page, 100 a page), edits it: one comment per
  pull request and suite, whatever the number of pushes.

GitHub's REST API through urllib (no dependency): ``$GITHUB_API_URL``, ``$GITHUB_REPOSITORY``,
``$GITHUB_TOKEN`` (the action passes its ``github-token`` input, the workflow's token by
default, which needs ``permissions: pull-requests: write``). A fork's pull request gets a
read-only token: it is told by the payload (head and base repositories differ) and no request
that writes is sent; a refusal by the API (403, or 404 as fine-grained tokens answer) and any
other failure to comment are said in one line in the job summary (``$GITHUB_STEP_SUMMARY``) and
on stdout. The comment never fails the job: the exit status is 0 whatever became of it, and the
energy check's own exit status stays compare's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "<!-- greenbench-energy-check{key} -->"
PER_PAGE = 100
MAX_PAGES = 100  # 10,000 comments: beyond that, a new comment rather than an endless listing
BODY_LIMIT = 65_000  # GitHub refuses a comment body above 65,536 characters
TIMEOUT_S = 30.0
OUTCOMES = ("pass", "regression", "inconclusive", "unstable", "error")


class CommentFailed(Exception):
    """The API refused or failed a request: ``status`` its HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Posted:
    """A comment written: its address, and whether an earlier one was edited."""

    url: str
    updated: bool


def marker(key: str) -> str:
    """The hidden first line that finds this check's comment again (``key``: the suite), with
    what would end an HTML comment taken out."""
    key = re.sub(r"\s+", " ", key.replace("--", "-").replace(">", "")).strip()
    return MARKER.format(key=f": {key}" if key else "")


class GitHub:
    """The few calls of GitHub's REST API the comment needs, one urllib request each."""

    def __init__(self, api_url: str, repository: str, token: str) -> None:
        self.api_url = api_url.rstrip("/")
        self.repository = repository
        self.token = token

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> tuple[Any, Mapping[str, str]]:
        """The answer's JSON and headers; CommentFailed on an HTTP error or no answer."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.api_url}{path}",
            data=data,
            method=method,
            headers={
                "Accept": "application/vnd.github+json",
                "Authorization": f"Bearer {self.token}",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": "greenbench-energy-check",
                **({"Content-Type": "application/json"} if data is not None else {}),
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as answer:
                payload = answer.read()
                headers = dict(answer.headers.items())
        except urllib.error.HTTPError as exc:
            detail = _message(exc.read())
            raise CommentFailed(
                f"GitHub answered {exc.code} to {method} {path}{f': {detail}' if detail else ''}",
                exc.code,
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CommentFailed(f"no answer from {self.api_url} ({reason})") from None
        try:
            return (json.loads(payload) if payload else None), headers
        except ValueError:
            raise CommentFailed(f"GitHub's answer to {method} {path} is not JSON") from None

    def find_comment(self, number: int, mark: str) -> dict[str, Any] | None:
        """The first comment of issue/PR ``number`` whose body begins with ``mark``, listing
        the comments page by page (``per_page=100&page=k``) while GitHub says there is a next
        page (its ``Link`` header; without one, while a page is full)."""
        for page in range(1, MAX_PAGES + 1):
            path = (
                f"/repos/{self.repository}/issues/{number}/comments?per_page={PER_PAGE}&page={page}"
            )
            comments, headers = self.request("GET", path)
            if not isinstance(comments, list):
                raise CommentFailed(f"GitHub's answer to GET {path} is not a list")
            for comment in comments:
                if str(comment.get("body") or "").startswith(mark):
                    return comment
            link = next((v for k, v in headers.items() if k.lower() == "link"), None)
            more = 'rel="next"' in link if link is not None else len(comments) == PER_PAGE
            if not more:
                return None
        return None

    def upsert(self, number: int, mark: str, body: str) -> Posted:
        """Edit this check's comment on ``number`` (found by ``mark``), or post it."""
        found = self.find_comment(number, mark)
        if found is not None:
            path = f"/repos/{self.repository}/issues/comments/{found['id']}"
            comment, _ = self.request("PATCH", path, {"body": body})
            return Posted(str((comment or {}).get("html_url") or found.get("html_url", "")), True)
        path = f"/repos/{self.repository}/issues/{number}/comments"
        comment, _ = self.request("POST", path, {"body": body})
        return Posted(str((comment or {}).get("html_url", "")), False)


@dataclass(frozen=True)
class PullRequest:
    """What the event payload says of the pull request: its number and whether it comes from
    a fork (``head_repo`` differs from ``base_repo``; empty when the fork is gone)."""

    number: int
    head_repo: str
    base_repo: str

    @property
    def from_fork(self) -> bool:
        return self.head_repo != self.base_repo


def pull_request(event_path: str | None) -> PullRequest | None:
    """The pull request of the workflow's event (``$GITHUB_EVENT_PATH``); None for another
    event (a push, a schedule) or no readable payload."""
    if not event_path:
        return None
    try:
        payload = json.loads(Path(event_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pr = payload.get("pull_request") if isinstance(payload, dict) else None
    if not isinstance(pr, dict) or not isinstance(pr.get("number"), int):
        return None

    def repo(side: str) -> str:
        found = (pr.get(side) or {}).get("repo") or {}
        return str(found.get("full_name") or "")

    return PullRequest(pr["number"], repo("head"), repo("base"))


def comment_body(
    mark: str,
    verdict_markdown: str,
    outcome: str,
    *,
    base: str = "",
    head: str = "",
    server_url: str = "",
    repository: str = "",
    run_url: str = "",
    key: str = "",
) -> str:
    """The comment: the marker, a heading with the outcome, links to both commits and to the
    workflow run, then compare's Markdown verdict (cut where GitHub's size limit needs)."""

    def commit(sha: str) -> str:
        short = f"`{sha[:10]}`"
        if server_url and repository and re.fullmatch(r"[0-9a-f]{7,64}", sha):
            return f"[{short}]({server_url}/{repository}/commit/{sha})"
        return short

    links = []
    if head or base:
        links.append(f"head {commit(head or '?')} against base {commit(base or '?')}")
    if key:
        links.append(f"suite `{key}`")
    if run_url:
        links.append(f"[workflow run]({run_url})")
    lines = [mark, f"## greenbench energy check: {outcome}", ""]
    if links:
        lines += [" · ".join(links), ""]
    foot = (
        "\n\n<sub>One comment per pull request and suite, edited on each push by greenbench's "
        "energy check; each round's log is in the workflow run.</sub>\n"
    )
    text = verdict_markdown.strip()
    room = BODY_LIMIT - len("\n".join(lines)) - len(foot) - 200
    if len(text) > room:
        cut = text[:room].rsplit("\n", 1)[0]
        text = cut + "\n\n*(cut to GitHub's comment size: the whole verdict is in the job summary)*"
    return "\n".join(lines) + text + foot


def read_verdict(path: str | None, exit_code: int) -> tuple[str, str]:
    """``(outcome, summary)`` from compare's JSON verdict; ``("error", why)`` when compare could
    not judge (no JSON: a bad input, exit 2)."""
    doc: Any = None
    if path:
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            doc = None
    if isinstance(doc, dict) and doc.get("outcome") in OUTCOMES:
        return str(doc["outcome"]), str(doc.get("summary", ""))
    return "error", f"greenbench compare could not judge (exit {exit_code})"


def write_outputs(path: str | None, outputs: Mapping[str, str]) -> None:
    """Append ``name=value`` lines to ``$GITHUB_OUTPUT`` (values on one line)."""
    if not path:
        return
    with Path(path).open("a", encoding="utf-8") as f:
        for name, value in outputs.items():
            f.write(f"{name}={' '.join(str(value).split())}\n")


def note(summary: str | None, text: str) -> None:
    """One line on stdout and, where there is one, in the job summary."""
    print(f"energy check: {text}")
    if summary:
        try:
            with Path(summary).open("a", encoding="utf-8") as f:
                f.write(f"\n> **Pull-request comment:** {text}\n")
        except OSError as exc:
            print(f"energy check: cannot write the job summary {summary} ({exc.strerror})")


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The module's command (module docstring); returns 0 unless its arguments are wrong."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="python -m greenbench.compare.pr_comment",
        description="Post or update the energy check's pull-request comment; write its outputs.",
    )
    parser.add_argument("--markdown", required=True, help="compare's Markdown verdict (a file)")
    parser.add_argument("--verdict", help="compare's JSON verdict (a file)")
    parser.add_argument("--exit-code", type=int, required=True, help="compare's exit status")
    parser.add_argument("--errors", help="compare's stderr (a file), shown when it could not judge")
    parser.add_argument("--key", default="", help="what tells this check's comment (the suite)")
    parser.add_argument("--base", default="", help="the base commit")
    parser.add_argument("--head", default="", help="the head commit")
    parser.add_argument("--summary", help="the job summary (default: $GITHUB_STEP_SUMMARY)")
    parser.add_argument(
        "--comment", choices=("auto", "no"), default="auto",
        help="auto: comment on a pull request's event; no: outputs only",
    )  # fmt: skip
    args = parser.parse_args(argv)
    summary_path = args.summary or env.get("GITHUB_STEP_SUMMARY") or None
    outcome, summary = read_verdict(args.verdict, args.exit_code)
    markdown = _read(args.markdown)
    if outcome == "error":
        errors = _read(args.errors).strip()
        markdown = f"**{summary}**" + (f":\n\n```\n{errors[-3000:]}\n```" if errors else "")
    url = ""
    if args.comment == "auto":
        url = _comment(args, env, markdown, outcome, summary_path)
    write_outputs(
        env.get("GITHUB_OUTPUT"),
        {"verdict": outcome, "exit-code": str(args.exit_code), "summary": summary,
         "comment-url": url},
    )  # fmt: skip
    return 0


def _comment(
    args: argparse.Namespace,
    env: Mapping[str, str],
    markdown: str,
    outcome: str,
    summary_path: str | None,
) -> str:
    """Post or edit the comment where there is a pull request to comment on; its URL, or ""
    (with why in the job summary where it was wanted but could not be written)."""
    pr = pull_request(env.get("GITHUB_EVENT_PATH"))
    if pr is None:
        return ""  # not a pull request's event: nothing to comment on
    if pr.from_fork:
        note(
            summary_path,
            f"skipped: pull request #{pr.number} comes from a fork "
            f"({pr.head_repo or 'deleted'}), whose token may not write comments; the verdict "
            "is above.",
        )
        return ""
    token, repository = env.get("GITHUB_TOKEN", ""), env.get("GITHUB_REPOSITORY", "")
    if not token or not repository:
        missing = "GITHUB_TOKEN" if not token else "GITHUB_REPOSITORY"
        note(summary_path, f"skipped: no {missing} (pass the action's github-token input).")
        return ""
    server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    run_id = env.get("GITHUB_RUN_ID", "")
    run_url = f"{server}/{repository}/actions/runs/{run_id}" if run_id else ""
    mark = marker(args.key)
    body = comment_body(
        mark, markdown, outcome, base=args.base, head=args.head, server_url=server,
        repository=repository, run_url=run_url, key=args.key,
    )  # fmt: skip
    api = GitHub(env.get("GITHUB_API_URL", "https://api.github.com"), repository, token)
    try:
        posted = api.upsert(pr.number, mark, body)
    except CommentFailed as exc:
        why = str(exc)
        if exc.status in (403, 404):
            why += (
                " (the token may not write to this pull request: a fork's token is read-only; "
                "otherwise give the job `permissions: pull-requests: write`)"
            )
        note(summary_path, f"not written: {why}; the verdict is above.")
        return ""
    print(f"energy check: {'updated' if posted.updated else 'posted'} {posted.url}")
    return posted.url


def _message(raw: bytes) -> str:
    """GitHub's error message from an error answer's body, if it has one."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return ""
    return str(doc.get("message", "")) if isinstance(doc, dict) else ""


def _read(path: str | None) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return ""


if __name__ == "__main__":
    sys.exit(main())
