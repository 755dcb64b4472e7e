"""End to end: the real dashboard server, driven by a real headless Chromium (Playwright).

Uses Debian's chromium (/usr/bin/chromium), never Playwright's downloaded browsers. A session
fixture installs it with apt-get when it is missing and we are root; otherwise the test is
skipped with the reason. The server is started through ``greenbench.dashboard_app.serve.serve``
exactly as `greenbench dashboard` does, in its own process group, and killed in a finally.
"""

from __future__ import annotations

import os
import re
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


#: what the page shows of every grid: each cell's text with its column's heading
GRID_CELLS = """() => {
  const out = [];
  for (const grid of document.querySelectorAll("[data-testid='stDataFrame']")) {
    const heads = {};
    for (const th of grid.querySelectorAll("th[role=columnheader]")) {
      heads[th.getAttribute("aria-colindex")] = th.textContent.trim();
    }
    for (const td of grid.querySelectorAll("td[role=gridcell]")) {
      out.push([heads[td.getAttribute("aria-colindex")] || "", td.textContent.trim()]);
    }
    for (const th of grid.querySelectorAll("th[role=columnheader]")) {
      out.push(["", th.textContent.trim()]);
    }
  }
  return out;
}"""
#: how far the leaderboard's grid overflows its box (scroll width − client width, px)
OVERFLOW = """() => {
  const grid = document.querySelector("[data-testid='stDataFrame']");
  const scroller = grid && grid.querySelector(".dvn-scroller");
  return scroller ? [scroller.scrollWidth, scroller.clientWidth] : null;
}"""
#: an energy figure below zero in a cell: "-0.5", "≈ -0.5 (est.)"
NEGATIVE = re.compile(r"^(≈ )?[-−]\d")
#: the trust labels the page must carry somewhere across its tabs
TRUST_LABELS = ("≈ estimate", "emulated (GPU power model)", "simulated (model)", "⚠ contended")


def _page_text(page: Any) -> tuple[str, list[list[str]]]:
    """The page's visible text and every grid cell (with its column's heading)."""
    return page.evaluate("() => document.body.innerText"), page.evaluate(GRID_CELLS)


def _check_tab(page: Any, tab: str) -> str:
    """No Streamlit exception, no Python None, no negative energy on the open tab; its text."""
    text, cells = _page_text(page)
    assert page.locator("[data-testid='stException']").count() == 0, f"{tab}: {text[:2000]}"
    assert "Traceback" not in text, tab
    everything = text + "\n" + "\n".join(cell for _, cell in cells)
    assert not re.search(r"\bNone\b", everything), f"{tab}: 'None' shown: {everything[:3000]}"
    for heading, cell in cells:
        if "J" in heading or "energy" in heading or "CO2" in heading:
            assert not NEGATIVE.match(cell), f"{tab}: negative energy {cell!r} under {heading!r}"
    return everything


def _open_tab(page: Any, tab: str, ready: str) -> str:
    from playwright.sync_api import expect

    page.get_by_role("tab", name=tab).click()
    expect(page.get_by_text(ready).first).to_be_visible(timeout=WAIT_MS)
    page.wait_for_timeout(500)  # the tab's last elements render after its first
    return _check_tab(page, tab)


def _choose(page: Any, label: str, option: str) -> None:
    """Pick the option containing ``option`` in the selectbox labelled ``label``."""
    from playwright.sync_api import expect

    box = page.locator("[data-testid='stSelectbox']").filter(has_text=label).first
    box.locator("input").click()
    page.get_by_role("option").filter(has_text=option).first.click()
    expect(box.get_by_role("combobox")).to_have_value(
        re.compile(re.escape(option)), timeout=WAIT_MS
    )


def test_every_tab_in_headless_chromium(
    chromium: Path, kinds_db: Path, seeded: Any, seeded_kinds: Any, tmp_path: Path
) -> None:
    """One server over one database holding every kind of run (measured, estimated, emulated,
    simulated, contended, failed, a whole process), one browser at 1400 px: every tab opens
    without an exception, shows no None and no negative energy, the trust labels are there, the
    leaderboard's columns fit its box, a run written meanwhile shows up, and a Pareto point and
    a simulated and an own-measurement configuration open."""
    from playwright.sync_api import expect, sync_playwright

    seen: list[str] = []
    with dashboard_server(kinds_db, tmp_path) as (url, port, log):
        assert f"greenbench dashboard on http://localhost:{port}" in log.read_text()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(chromium), args=LAUNCH_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(url)
                cells = page.locator("[data-testid='stDataFrame'] td[role=gridcell]")
                expect(page.get_by_role("heading", name="Leaderboard")).to_be_visible(
                    timeout=WAIT_MS
                )
                expect(cells.filter(has_text=seeded_kinds.contended)).to_have_count(
                    1, timeout=WAIT_MS
                )
                page.wait_for_timeout(500)
                board = _check_tab(page, "Leaderboard")
                seen.append(board)
                for hidden in (*seeded_kinds.simulated, "sleepy", seeded_kinds.emulated_prefix):
                    assert hidden not in board  # simulated, emulated, own: never ranked
                scroll, client = page.evaluate(OVERFLOW)
                assert scroll <= client, f"leaderboard cut off: {scroll} px in {client} px"
                page.screenshot(path=str(tmp_path / "leaderboard.png"))

                # a run writes to the same file while the dashboard is open, and shows up
                done = seeded.write_run(kinds_db)
                assert done.returncode == 0, done.stderr
                page.get_by_role("button", name="Reload data").click()
                expect(cells.filter(has_text=seeded.new_config)).to_have_count(1, timeout=WAIT_MS)

                seen.append(_open_tab(page, "Pareto", "Non-dominated configurations"))
                chart = page.locator(".vega-embed").first
                expect(chart.locator("svg.marks, canvas.marks").first).to_be_visible(
                    timeout=WAIT_MS
                )
                point = chart.locator(f"g.mark-symbol path[aria-label*='{seeded_kinds.contended}']")
                expect(point).to_have_count(1)
                page.screenshot(path=str(tmp_path / "pareto.png"))
                point.click()  # selecting a point opens that configuration
                expect(page.get_by_role("heading", name=seeded_kinds.contended)).to_be_visible(
                    timeout=WAIT_MS
                )
                seen.append(_check_tab(page, "Pareto, a point opened"))

                seen.append(_open_tab(page, "Run detail", "How far to trust it"))
                _choose(page, "Configuration", f"[simulated] {seeded_kinds.simulated[0]}")
                expect(page.get_by_text("Simulated, not measured.").first).to_be_visible(
                    timeout=WAIT_MS
                )
                seen.append(_check_tab(page, "Run detail, simulated"))
                _choose(page, "Configuration", "[own measurement] sleepy")
                expect(page.get_by_role("heading", name="sleepy")).to_be_visible(timeout=WAIT_MS)
                expect(page.get_by_role("combobox", name="Run")).to_have_value(
                    re.compile("sha unknown")  # stored without a git sha: never "sha None"
                )
                seen.append(_check_tab(page, "Run detail, own measurement"))
                page.screenshot(path=str(tmp_path / "detail.png"), full_page=True)

                seen.append(_open_tab(page, "History", "History of one configuration"))
                seen.append(_open_tab(page, "Comparisons", "Simulated, not measured ("))
                seen.append(_open_tab(page, "Quality", "No run trained to a target loss yet"))
                seen.append(_open_tab(page, "Own measurements", "whole process"))
                seen.append(_open_tab(page, "Power limits", "a model, not a measurement"))
            finally:
                browser.close()
    everything = "\n".join(seen)
    for label in TRUST_LABELS:
        assert label in everything, f"{label!r} is shown on no tab"
    assert (tmp_path / "pareto.png").stat().st_size > 10_000


def test_history_per_branch_in_headless_chromium(
    chromium: Path, branches_db: Path, seeded: Any, tmp_path: Path
) -> None:
    """One configuration run on two git branches: the History view, one point per branch,
    draws a point for each branch and lists both; filtered to one branch it shows that one."""
    from playwright.sync_api import expect, sync_playwright

    with dashboard_server(branches_db, tmp_path) as (url, _, _):
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(chromium), args=LAUNCH_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"{url}/?view=History")
                expect(page.get_by_text("History of one configuration").first).to_be_visible(
                    timeout=WAIT_MS
                )
                _choose(page, "Configuration", seeded.two_branch_config)
                axis = page.locator("[data-testid='stRadio']").filter(has_text="One point per")
                axis.get_by_text("branch", exact=True).click()
                chart = page.locator(".vega-embed").first
                points = chart.locator("g.mark-symbol.role-mark path")  # not the legend's
                branches = [branch for _, branch in seeded.branches]
                for branch in branches:  # a point's description names its branch
                    expect(
                        points.and_(chart.locator(f"path[aria-label*='{branch}']"))
                    ).to_have_count(1, timeout=WAIT_MS)
                page.wait_for_timeout(500)
                shown = _check_tab(page, "History, one point per branch")
                cells = page.evaluate(GRID_CELLS)
                assert [c for h, c in cells if h == "branch" and c in branches] == branches
                page.screenshot(path=str(tmp_path / "history.png"), full_page=True)

                _choose(page, "Git branch", branches[0])
                expect(page.get_by_text("Only one branch so far").first).to_be_visible(
                    timeout=WAIT_MS
                )
                expect(points).to_have_count(1, timeout=WAIT_MS)
                grid = page.locator("[data-testid='stDataFrame'] td[role=gridcell]")
                expect(grid.filter(has_text=branches[1])).to_have_count(0, timeout=WAIT_MS)
                expect(grid.filter(has_text=branches[0])).to_have_count(1, timeout=WAIT_MS)
                cells = page.evaluate(GRID_CELLS)
                assert [c for h, c in cells if h == "branch" and c in branches] == branches[:1]
            finally:
                browser.close()
    assert branches[1] in shown
