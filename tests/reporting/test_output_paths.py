"""`greenbench report --out` and `greenbench export --out`: where output may go, and atomicity.

Why: these commands write where the user points. An existing report or export must not be
replaced without ``--force``; a device (``/dev/full``), an unwritable folder or a full disk must
give one clear line and exit 2, never a traceback or a half-written file; a path outside the
working directory is written (the user typed it) but the printed line names where it went.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greenbench.cli import main


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Work inside tmp_path, so that its paths are inside the current directory."""
    monkeypatch.chdir(tmp_path)


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _one_clear_line(result: Any, *needles: str) -> None:
    """Exit 2 with exactly one `error:` line on stderr and no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


def _leftovers(folder: Path) -> list[str]:
    """Temporary names our writers use (``.NAME.<random>.tmp`` / ``.old``)."""
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def _unwritable_dir(tmp_path: Path) -> Path:
    """A folder this process cannot create files in: chmod 0o500, or, as root (who ignores
    permission bits), sysfs, where not even root may create a file."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        (folder / "probe").touch()
    except PermissionError:
        return folder
    (folder / "probe").unlink()
    sysfs = Path("/sys")
    try:
        (sysfs / "greenbench-probe").touch()
    except OSError:
        return sysfs
    pytest.skip("no folder here refuses file creation to this user (root on a writable /sys)")


# --- export ----------------------------------------------------------------------------------


def test_export_refuses_an_existing_file_without_force(seeded_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "results.csv"
    target.write_text("keep me\n")
    result = _invoke("export", "--out", str(target), "--db", str(seeded_db))
    _one_clear_line(result, str(target), "--force")
    assert target.read_text() == "keep me\n"
    assert _leftovers(tmp_path) == []


def test_export_with_force_overwrites(seeded_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "results.csv"
    target.write_text("old\n")
    result = _invoke("export", "--out", str(target), "--force", "--db", str(seeded_db))
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {target}"
    text = target.read_text()
    assert text.startswith("run_id,") and len(text.splitlines()) == 11 * 3 + 1 + 1
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_export_to_dev_full_is_one_line(seeded_db: Path, force: list[str]) -> None:
    result = _invoke("export", "--out", "/dev/full", *force, "--db", str(seeded_db))
    _one_clear_line(result, "/dev/full", "not a regular file")
    assert Path("/dev/full").is_char_device()


def test_export_into_an_unwritable_folder(seeded_db: Path, tmp_path: Path) -> None:
    folder = _unwritable_dir(tmp_path)
    result = _invoke("export", "--out", str(folder / "gb-results.csv"), "--db", str(seeded_db))
    _one_clear_line(result, "cannot write", "gb-results.csv")
    assert not (folder / "gb-results.csv").exists()


def test_export_outside_the_working_directory_says_where(
    seeded_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    result = _invoke("export", "--out", "../../x.csv", "--db", str(seeded_db))
    assert result.exit_code == 0, result.output
    written = tmp_path / "x.csv"
    assert written.read_text().startswith("run_id,")
    assert result.output.strip() == f"wrote {written} (outside the current directory {inner})"
    inside = _invoke("export", "--out", "y.csv", "--db", str(seeded_db))
    assert inside.output.strip() == f"wrote {inner / 'y.csv'}"


def test_export_failing_midway_leaves_no_file(
    seeded_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while DuckDB writes: one line, exit 2, no partial file, no temporary."""
    from greenbench.store import queries

    class FullDisk:
        """The real read-only connection, whose COPY writes half a file and finds the disk
        full: whatever the export asks before it (the schema, its functions) runs as it would."""

        def __init__(self, con: Any) -> None:
            self.con = con

        def __getattr__(self, name: str) -> Any:
            return getattr(self.con, name)

        def execute(self, sql: str, params: list[str] | None = None) -> Any:
            if sql.lstrip().startswith("COPY"):
                Path(params[0]).write_text("run_id,half a ro")  # type: ignore[index]
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.con.execute(sql, params or [])

    read = queries._read
    monkeypatch.setattr(
        queries, "_read", lambda path, fn, timeout_s: read(path, lambda c: fn(FullDisk(c)), 8.0)
    )
    target = tmp_path / "results.csv"
    result = _invoke("export", "--out", str(target), "--db", str(seeded_db))
    _one_clear_line(result, str(target), "No space left on device")
    assert not target.exists() and _leftovers(tmp_path) == []


def test_export_never_replaces_the_database(seeded_db: Path) -> None:
    before = seeded_db.read_bytes()
    result = _invoke("export", "--out", str(seeded_db), "--force", "--db", str(seeded_db))
    _one_clear_line(result, "results database itself")
    assert seeded_db.read_bytes() == before


# --- report ----------------------------------------------------------------------------------


def test_report_refuses_an_existing_report_without_force(seeded_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    first = _invoke("report", "--out", str(out), "--title", "first", "--db", str(seeded_db))
    assert first.exit_code == 0, first.output
    assert first.output.strip() == f"wrote {out / 'README.md'}"
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = _invoke("report", "--out", str(out), "--title", "second", "--db", str(seeded_db))
    _one_clear_line(again, str(out), "--force")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert _leftovers(tmp_path) == []


def test_report_with_force_replaces_an_earlier_report(seeded_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    out.mkdir()
    (out / "README.md").write_text("# old report\n")
    (out / "workload-gone.png").write_bytes(b"\x89PNG old")
    result = _invoke(
        "report", "--out", str(out), "--force", "--title", "new", "--db", str(seeded_db)
    )
    assert result.exit_code == 0, result.output
    assert (out / "README.md").read_text().startswith("# new\n")
    assert not (out / "workload-gone.png").exists()  # a folder of only a report: replaced whole
    assert (out / "pareto.png").is_file() and _leftovers(tmp_path) == []


def test_report_with_force_keeps_a_folders_other_files(seeded_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "docs"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    refused = _invoke("report", "--out", str(out), "--db", str(seeded_db))
    _one_clear_line(refused, "--force")
    result = _invoke("report", "--out", str(out), "--force", "--db", str(seeded_db))
    assert result.exit_code == 0, result.output
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "README.md").is_file()
    assert _leftovers(out) == [] and _leftovers(tmp_path) == []


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_report_to_dev_full_is_one_line(seeded_db: Path, force: list[str]) -> None:
    result = _invoke("report", "--out", "/dev/full", *force, "--db", str(seeded_db))
    _one_clear_line(result, "/dev/full", "not a folder")
    assert Path("/dev/full").is_char_device()


def test_report_into_an_unwritable_folder(seeded_db: Path, tmp_path: Path) -> None:
    folder = _unwritable_dir(tmp_path)
    result = _invoke("report", "--out", str(folder / "gb-report"), "--db", str(seeded_db))
    _one_clear_line(result, "cannot write", "gb-report")
    assert not (folder / "gb-report").exists()


def test_report_failing_midway_leaves_nothing(
    seeded_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills after the first plot: no report folder, not even the parents it made."""
    from greenbench.reporting import figures

    saved: list[Path] = []
    real_save = figures.save

    def save_then_fill(fig: Any, path: Path) -> None:
        if saved:
            path.write_bytes(b"\x89PNG half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_save(fig, path)
        saved.append(path)

    monkeypatch.setattr(figures, "save", save_then_fill)
    out = tmp_path / "reports" / "new"
    result = _invoke("report", "--out", str(out), "--db", str(seeded_db))
    _one_clear_line(result, str(out), "No space left on device")
    assert saved and not (tmp_path / "reports").exists()
    assert _leftovers(tmp_path) == []


def test_report_outside_the_working_directory_says_where(
    seeded_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = tmp_path / "a"
    inner.mkdir()
    monkeypatch.chdir(inner)
    result = _invoke("report", "--out", "../rep", "--db", str(seeded_db))
    assert result.exit_code == 0, result.output
    readme = tmp_path / "rep" / "README.md"
    assert readme.is_file()
    assert result.output.strip() == f"wrote {readme} (outside the current directory {inner})"
