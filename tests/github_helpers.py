"""A local HTTP server that plays GitHub's REST API for one pull request's issue comments:
listed page by page with ``Link`` headers, created, edited, and refused (403) where the token may
not write. Importable from any test (``pythonpath`` in pyproject)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

REPO, NUMBER, TOKEN = "octo/model", 7, "t0ken"
WRITES = ("POST", "PATCH")


class FakeGitHub:
    """Issue comments of one pull request, as GitHub's REST API serves them."""

    def __init__(self, others: int = 0, refuse_writes: bool = False) -> None:
        self.comments: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.refuse_writes = refuse_writes
        for i in range(others):
            self.add(f"comment {i}")

    def add(self, body: str) -> dict[str, Any]:
        cid = 1000 + len(self.comments)
        comment = {
            "id": cid,
            "body": body,
            "html_url": f"https://github.com/{REPO}/pull/{NUMBER}#issuecomment-{cid}",
        }
        self.comments.append(comment)
        return comment

    def ours(self) -> list[dict[str, Any]]:
        return [c for c in self.comments if c["body"].startswith("<!-- greenbench-energy-check")]


@contextmanager
def serving(fake: FakeGitHub) -> Iterator[str]:
    """``fake`` served on a free local port for the block; yields its API URL."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def answer(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def handle_any(self) -> None:
            url = urlsplit(self.path)
            fake.requests.append((self.command, url.path))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self.answer(401, {"message": "Bad credentials"})
            body = None
            if self.command in WRITES:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                if fake.refuse_writes:
                    return self.answer(403, {"message": "Resource not accessible by integration"})
            listing = f"/repos/{REPO}/issues/{NUMBER}/comments"
            if self.command == "GET" and url.path == listing:
                query = parse_qs(url.query)
                per_page, page = int(query["per_page"][0]), int(query["page"][0])
                pages = max(1, -(-len(fake.comments) // per_page))
                items = fake.comments[(page - 1) * per_page : page * per_page]
                link = f'<{url.path}?per_page={per_page}&page={pages}>; rel="last"'
                if page < pages:
                    link = f'<{url.path}?per_page={per_page}&page={page + 1}>; rel="next", {link}'
                return self.answer(200, items, {"Link": link})
            if self.command == "POST" and url.path == listing:
                return self.answer(201, fake.add(body["body"]))
            found = re.fullmatch(rf"/repos/{REPO}/issues/comments/(\d+)", url.path)
            if self.command == "PATCH" and found:
                for comment in fake.comments:
                    if comment["id"] == int(found.group(1)):
                        comment["body"] = body["body"]
                        return self.answer(200, comment)
            return self.answer(404, {"message": "Not Found"})

        do_GET = do_POST = do_PATCH = handle_any

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def pull_request_event(path: Path, head_repo: str = REPO) -> Path:
    """A ``pull_request`` event payload at ``path``: pull request NUMBER of REPO, from
    ``head_repo`` (another repository: a fork)."""
    payload = {
        "pull_request": {
            "number": NUMBER,
            "head": {"repo": {"full_name": head_repo}},
            "base": {"repo": {"full_name": REPO}},
        }
    }
    path.write_text(json.dumps(payload))
    return path
