"""End to end: the real dashboard server, driven by a real headless Chromium (Playwright).

Uses Debian's chromium (/usr/bin/chromium), never Playwright's downloaded browsers. A session
fixture installs it with apt-get when it is missing and we are root; otherwise the test is
skipped with the reason. The server is started through ``greenbench.dashboard_app.serve.serve``
exactly as `greenbench dashboard` does, in its own process group, and killed in a finally.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from greenbench.dashboard_app.serve import free_port

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SERVE = (
    "import sys; from pathlib import Path; from greenbench.dashboard_app.serve import serve; "
    "sys.exit(serve(Path(sys.argv[1]), int(sys.argv[2])))"
)
GPU_CONFIG = "transformer/tiny seq=2048 fixed single×1"
WAIT_MS = 60_000


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's chromium, installed with apt-get if missing (idempotent), else a skip."""
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    if CHROMIUM.exists():
        return CHROMIUM
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(
            f"{CHROMIUM} is missing and cannot be installed here (needs root and apt-get); "
            "install it with `apt-get install chromium` to run browser tests"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
        except subprocess.TimeoutExpired:
            pytest.skip(f"`{' '.join(cmd)}` took more than 20 minutes")
        if done.returncode != 0:
            pytest.skip(f"`{' '.join(cmd)}` failed: {done.stderr.strip()[-400:]}")
    if not CHROMIUM.exists():
        pytest.skip(f"apt-get installed chromium but {CHROMIUM} does not exist")
    return CHROMIUM


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dashboard server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"dashboard server not healthy after 90 s:\n{log.read_text()}")


@contextmanager
def dashboard_server(db: Path, tmp_path: Path) -> Iterator[tuple[str, int, Path]]:
    port = free_port()
    log = tmp_path / "server.log"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(db), str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=env,
            start_new_session=True,  # serve's streamlit child shares the group: kill both
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc, log)
        yield url, port, log
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def test_leaderboard_and_pareto_in_headless_chromium(
    chromium: Path, dashboard_db: Path, seeded: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    with dashboard_server(dashboard_db, tmp_path) as (url, port, log):
        assert f"greenbench dashboard on http://localhost:{port}" in log.read_text()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(chromium), args=LAUNCH_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1100})
                page.goto(url)
                cells = page.locator("[data-testid='stDataFrame'] td[role=gridcell]")
                expect(page.get_by_role("heading", name="Leaderboard")).to_be_visible(
                    timeout=WAIT_MS
                )
                expect(cells.filter(has_text=GPU_CONFIG)).to_have_count(1, timeout=WAIT_MS)
                expect(cells.filter(has_text="≈ estimate").first).to_be_attached()
                page.screenshot(path=str(tmp_path / "leaderboard.png"))

                # a run writes to the same file while the dashboard is open, and shows up
                done = seeded.write_run(dashboard_db)
                assert done.returncode == 0, done.stderr
                page.get_by_role("button", name="Reload data").click()
                expect(cells.filter(has_text=seeded.new_config)).to_have_count(1, timeout=WAIT_MS)

                page.get_by_role("tab", name="Pareto").click()
                chart = page.locator(".vega-embed").first
                expect(chart.locator("svg.marks, canvas.marks").first).to_be_visible(
                    timeout=WAIT_MS
                )
                expect(page.get_by_text("Non-dominated configurations")).to_be_visible()
                gpu_point = chart.locator(f"g.mark-symbol path[aria-label*='{GPU_CONFIG}']")
                expect(gpu_point).to_have_count(1)
                page.screenshot(path=str(tmp_path / "pareto.png"))

                gpu_point.click()  # selecting a point opens that configuration
                expect(page.get_by_role("heading", name=GPU_CONFIG)).to_be_visible(timeout=WAIT_MS)
                expect(page.get_by_text("NVIDIA H100 80GB HBM3").first).to_be_attached()
            finally:
                browser.close()
    assert (tmp_path / "pareto.png").stat().st_size > 10_000
