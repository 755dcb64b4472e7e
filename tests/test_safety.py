"""Safety: what users type is data, no outside model code runs, the dashboard cannot write.

- ``--set`` values and suite files are parsed as data: an expression that would run code if
  evaluated is refused as a bad value, and nothing it names happens.
- Models are built from configs in this package, never loaded with remote code: no
  ``from_pretrained``, ``trust_remote_code=True``, ``eval`` or ``exec`` anywhere in greenbench.
- The dashboard offers no free-text input (so no SQL), and a session that uses every tab leaves
  the database file byte for byte as it was.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "greenbench"


def greenbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from greenbench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def test_set_values_and_suite_files_are_never_executed(tmp_path: Path):
    marker = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {marker}')"
    db = tmp_path / "r.duckdb"
    by_set = greenbench(
        "run", "--workload", "transformer-vs-mamba", "--set", f"model.size={payload}",
        "--db", str(db), cwd=tmp_path,
    )  # fmt: skip
    suite = tmp_path / "evil.toml"
    suite.write_text(
        'description = "x"\n[[entries]]\nworkload = "transformer-vs-mamba"\n'
        f'set = {{ "data.seq_len" = "{payload}" }}\n'
    )
    by_suite = greenbench("run", "--suite", str(suite), "--db", str(db), cwd=tmp_path)
    for result in (by_set, by_suite):
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert not marker.exists()
    assert not db.exists()


def _calls(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = getattr(f, "id", None) or getattr(f, "attr", "")
            out.append((name, node))
    return out


def test_no_remote_or_dynamic_code_in_the_package():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, call in _calls(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(PACKAGE.parent)}:{call.lineno}"
            if name in ("eval", "exec", "from_pretrained"):
                offenders.append(f"{where} calls {name}")
            for kw in call.keywords:
                if kw.arg == "trust_remote_code" and not (
                    isinstance(kw.value, ast.Constant) and kw.value.value is False
                ):
                    offenders.append(f"{where} passes trust_remote_code")
    assert offenders == []


@pytest.mark.parametrize("view", ["Leaderboard", "Pareto", "Run detail", "History", "Comparisons"])
def test_the_dashboard_has_no_text_input_and_leaves_the_database_untouched(
    seeded_db: Path, monkeypatch: pytest.MonkeyPatch, view: str
):
    from streamlit.testing.v1 import AppTest

    from greenbench.dashboard_app import data

    data.clear_cache()
    before = seeded_db.read_bytes(), seeded_db.stat().st_mtime_ns
    monkeypatch.setenv("GREENBENCH_DB", str(seeded_db))
    at = AppTest.from_file(str(PACKAGE / "dashboard_app" / "app.py"), default_timeout=60)
    at.query_params["view"] = view
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    for i in range(len(at.checkbox)):  # flip every switch the page offers, read afresh each
        at.checkbox[i].check().run()  # time: a switch can change what the page shows
    assert not at.exception
    assert len(at.text_input) == 0 and len(at.text_area) == 0 and len(at.chat_input) == 0
    assert (seeded_db.read_bytes(), seeded_db.stat().st_mtime_ns) == before
