"""`greenbench publish`: a static site of the results database that opens from disk.

Why: the site is shared as a folder (a CI artifact, a static host, an e-mail) and opened where
there may be no network. Every link must be relative and resolve inside the folder, no script
or stylesheet may come from the network, its leaderboard must show the rows and trust the
report's does, every energy figure must keep its label (CPU energy here is an estimate), a
configuration's history must be one click away, and a refusal (an empty database, a folder that
is not an earlier site) must write nothing. The browser test opens the site through file:// in
a headless Chromium with every network request aborted.
"""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import duckdb
import pytest
from click.testing import CliRunner

import greenbench
from greenbench.cli import main
from greenbench.errors import OutputError, StoreError
from greenbench.reporting.report import report_context, report_rows
from greenbench.reporting.sections.board import table_lines
from greenbench.reporting.site import publish
from greenbench.reporting.site.build import MANIFEST
from greenbench.reporting.site.html import markdown
from greenbench.vocabulary.trust import CONTENDED

SCHEMA = Path(greenbench.__file__).with_name("store_schema.sql")
CHROMIUM = Path("/usr/bin/chromium")
#: the seeded configuration measured while the machine was shared (set in `site_db`)
BUSY = "mamba/tiny seq=1024 fixed single×1"
#: a seeded configuration run on two commits (main, then feature)
TWO_COMMITS = "transformer/tiny seq=512 fixed single×1"


class Parsed(HTMLParser):
    """A page's ids, links (a/img/script/link targets) and tables (rows of cell texts)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []
        self.tables: list[list[list[str]]] = []
        self.specs: list[dict[str, Any]] = []
        self._cell: list[str] | None = None
        self._spec: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        for attr in ("href", "src"):
            if attr in a:
                self.links.append((tag, a[attr]))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "script" and "vega-spec" in a.get("class", ""):
            self._spec = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "script" and self._spec is not None:
            self.specs.append(json.loads("".join(self._spec)))
            self._spec = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._spec is not None:
            self._spec.append(data)


def parse(path: Path) -> Parsed:
    parsed = Parsed()
    parsed.feed(path.read_text(encoding="utf-8"))
    return parsed


def _set_contended(db: Path, config_name: str) -> None:
    con = duckdb.connect(str(db))
    con.execute(
        "UPDATE runs SET contended = true, others_busy_cores = 1.5 WHERE config_name = ?",
        [config_name],
    )
    con.close()


@pytest.fixture(scope="module")
def site_db(tmp_path_factory: pytest.TempPathFactory, _seeded_db_template: Path) -> Path:
    """The suite's seeded database (tests/conftest.py), one configuration marked contended."""
    db = tmp_path_factory.mktemp("site-db") / "greenbench.duckdb"
    shutil.copyfile(_seeded_db_template, db)
    _set_contended(db, BUSY)
    return db


@pytest.fixture(scope="module")
def site(site_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site of ``site_db``, published once for the module."""
    out = tmp_path_factory.mktemp("published") / "site"
    published = publish(site_db, out, title="Seeded results")
    assert published.index == out / "index.html"
    return out


@pytest.fixture(scope="module")
def board(site_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The report's leaderboard over the same database."""
    raw = report_rows(site_db)
    return report_context(site_db, tmp_path_factory.mktemp("ctx"), raw, whole_database=True).table


def _pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def _leaderboard(page: Parsed) -> list[list[str]]:
    """The index's first table (the leaderboard), header row first."""
    table = page.tables[0]
    assert table[0][:2] == ["workload", "configuration"], table[0]
    return table


def test_site_holds_an_index_a_history_page_per_configuration_and_one_bundle(
    site: Path, board: Any
) -> None:
    assert (site / "index.html").is_file()
    history = sorted((site / "history").glob("*.html"))
    assert len(history) == len(board) == 9  # one per leaderboard row (configuration, energy)
    bundles = [p for p in site.rglob("*.js")]
    assert [p.relative_to(site).as_posix() for p in bundles] == ["assets/vega-embed.js"]
    assert "vegaEmbed" in bundles[0].read_text(encoding="utf-8")
    manifest = json.loads((site / MANIFEST).read_text())
    assert manifest["generator"] == "greenbench publish"
    assert sorted(manifest["pages"]) == sorted(p.relative_to(site).as_posix() for p in _pages(site))
    # every figure here is drawn from the leaderboard: no PNG left behind, none linked
    assert not list(site.rglob("*.png"))
    # the JavaScript is in the site once, not in every page
    for page in _pages(site):
        assert page.stat().st_size < 200_000, page


def test_every_link_is_relative_and_resolves_inside_the_site(site: Path) -> None:
    for page in _pages(site):
        parsed = parse(page)
        for tag, target in parsed.links:
            parts = urlsplit(target)
            assert not parts.scheme and not parts.netloc, (page.name, tag, target)
            if tag in ("script", "link"):  # never from the network, never absolute
                assert not target.startswith("/"), (page.name, target)
            if not parts.path:  # a fragment of this page
                assert parts.fragment in parsed.ids, (page.name, target)
                continue
            resolved = (page.parent / unquote(parts.path)).resolve()
            assert resolved.is_file(), (page.name, target)
            assert resolved.is_relative_to(site.resolve()), (page.name, target)
            if parts.fragment:
                assert parts.fragment in parse(resolved).ids, (page.name, target)
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"<(script|link)[^>]+(src|href)=\"https?://", text), page.name
        assert "<link" not in text  # styles are inline


def test_leaderboard_has_the_reports_rows_and_trust(site: Path, board: Any) -> None:
    rows = _leaderboard(parse(site / "index.html"))
    header, body = rows[0], rows[1:]
    assert header[-1] == "trust"
    assert len(body) == len(board)
    by_name_energy = {(r[1], r[4]): r for r in body}
    for r in board.itertuples():
        cells = by_name_energy[(r.config_name, r.energy)]
        assert cells[-1] == r.trust and cells[-2] == str(r.n_repeats)
    # cell for cell the report's own leaderboard table, in its order
    report = [[c.strip() for c in line.strip("|").split(" | ")] for line in table_lines(board)[2:]]
    assert body == report
    busy = [r for r in body if r[1] == BUSY]
    assert len(busy) == 1 and CONTENDED in busy[0][-1]
    energies = {r[4] for r in body}
    assert energies == {"estimate", "measured (rapl)"}  # CPU energy estimated, RAPL measured


def test_every_configuration_links_its_history_page(site: Path, board: Any) -> None:
    index = parse(site / "index.html")
    history = [t for tag, t in index.links if tag == "a" and t.startswith("history/")]
    # each page linked twice: from the leaderboard and from the list of histories
    assert len(set(history)) == len(board) and len(history) == 2 * len(board)
    pages = {}
    for target in set(history):
        page = parse(site / target)
        table = page.tables[0]
        assert table[0][0] == "commit"
        pages[target] = (page, table[1:])
    two = [
        (p, rows)
        for t, (p, rows) in pages.items()
        if TWO_COMMITS in (site / t).read_text(encoding="utf-8")
        and "estimate" in {r[3] for r in rows}
    ]
    assert len(two) == 1
    page, rows = two[0]
    assert len(rows) == 2  # main's commit, then feature's, oldest first
    assert [r[0] for r in rows] == ["3f2c9e1b7a", "9d8c7b6a5f"]
    assert len(page.specs) == 2  # J/token and tokens/s per commit
    for spec in page.specs:
        values = next(iter(spec["datasets"].values()))
        assert [v["git_sha"][:10] for v in values] == ["3f2c9e1b7a", "9d8c7b6a5f"]
        layers = spec["layer"]
        assert any(layer["mark"]["type"] == "rule" for layer in layers)  # interval bars


def test_charts_keep_energy_labels_and_never_pool_kinds(site: Path) -> None:
    index = parse(site / "index.html")
    pareto = [s for s in index.specs if "speed against energy" in json.dumps(s.get("title", ""))]
    assert len(pareto) == 3  # data-parallel estimate; transformer-vs-mamba estimate, rapl
    for spec in pareto:
        values = next(iter(spec["datasets"].values()))
        energies = {v["energy"] for v in values}
        assert len(energies) == 1, energies  # one kind of energy figure per front
        (energy,) = energies
        assert f"energy: {energy}" in spec["title"]["subtitle"]
        y_titles = {
            layer["encoding"]["y"].get("title")
            for layer in spec["layer"]
            if "title" in layer["encoding"].get("y", {})
        }
        assert f"J/token, {energy} (lower is better)" in y_titles
        if energy == "estimate":
            assert any("estimate: time × modelled power" in s for s in spec["title"]["subtitle"])
        if any(v["config_name"] == BUSY for v in values):
            assert any(v["contended"] for v in values if v["config_name"] == BUSY)
            assert any(
                layer.get("transform") == [{"filter": "datum.contended"}] for layer in spec["layer"]
            )  # ringed
    text = (site / "index.html").read_text(encoding="utf-8")
    assert "Some energy figures are measured and some estimated" in text  # the report's header


def test_headings_get_unique_anchors() -> None:
    taken: set[str] = set()
    out, headings = markdown(["## Workload `a`", "", "## Workload `a`", "", "<b>x</b>"], taken)
    assert [h.anchor for h in headings] == ["workload-a", "workload-a-2"]
    assert "&lt;b&gt;" in out  # raw HTML in the report's text is escaped, never passed through


def test_empty_database_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    con = duckdb.connect(str(db))
    con.execute(SCHEMA.read_text())
    con.close()
    with pytest.raises(StoreError, match="holds no finished runs"):
        publish(db, tmp_path / "out" / "site")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.duckdb"]


def test_a_non_empty_folder_is_refused_and_only_an_earlier_site_replaced(
    site_db: Path, tmp_path: Path
) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(OutputError):
            publish(site_db, foreign, force=force)
        assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    out = tmp_path / "site"
    publish(site_db, out, title="first")
    with pytest.raises(OutputError, match="--force"):
        publish(site_db, out, title="second")
    assert "<title>first</title>" in (out / "index.html").read_text()
    stale = out / "history" / "stale.html"
    stale.write_text("left from an earlier publish")
    publish(site_db, out, title="second", force=True)
    assert "<title>second</title>" in (out / "index.html").read_text()
    assert not stale.exists()  # replaced whole
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_cli_publishes_and_refuses_in_one_line(site_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    done = CliRunner().invoke(main, ["publish", "--out", str(out), "--db", str(site_db)])
    assert done.exit_code == 0, done.output
    assert "wrote" in done.output and "index.html" in done.output and "10 pages" in done.output
    again = CliRunner().invoke(main, ["publish", "--out", str(out), "--db", str(site_db)])
    assert again.exit_code == 2
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--force" in lines[0]


# ------------------------------------------------------------------------------ browser


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Debian's chromium with Playwright's Python package, else a skip."""
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install chromium` to run browser tests")
    return CHROMIUM


@pytest.mark.browser
def test_site_opens_from_disk_in_chromium_with_the_network_blocked(
    chromium: Path, site: Path, board: Any
) -> None:
    from playwright.sync_api import expect, sync_playwright

    asked: list[str] = []
    problems: list[str] = []

    def only_files(route: Any) -> None:
        url = route.request.url
        if url.startswith("file://"):
            route.continue_()
        else:
            asked.append(url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.route("**/*", only_files)
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto((site / "index.html").as_uri())
            rows = page.locator("table").first.locator("tbody tr")
            expect(rows).to_have_count(len(board))
            for name in board["config_name"]:
                expect(rows.filter(has_text=name).first).to_be_visible()
            charts = page.locator(".vega-embed")
            expect(charts.first.locator("svg").first).to_be_visible(timeout=30_000)
            assert charts.count() == page.locator("script.vega-spec").count() >= 3
            expect(charts.locator("svg.marks")).to_have_count(charts.count(), timeout=30_000)

            link = page.locator("table").first.get_by_role("link", name=TWO_COMMITS).first
            link.click()
            expect(page.get_by_role("heading", level=1)).to_have_text(TWO_COMMITS)
            assert page.url.startswith("file://") and "/history/" in page.url
            expect(page.locator(".vega-embed svg.marks")).to_have_count(2, timeout=30_000)
            page.get_by_role("link", name="all histories").click()
            expect(page.locator("#history-per-configuration")).to_be_visible()
        finally:
            browser.close()
    assert asked == [], f"requests to the network: {asked}"
    assert problems == [], problems
