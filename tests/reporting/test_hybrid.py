"""greenbench.reporting.hybrid: the layouts' table and the study's findings beside it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import duckdb

from greenbench.reporting.hybrid import kind, read_layouts, section

_spec = importlib.util.spec_from_file_location(
    "report_fixtures", Path(__file__).with_name("test_report.py")
)
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)  # type: ignore[union-attr]

#: layout -> (tokens/s, model state MiB)
MEASURED = {
    "dpr4-dps1-tp1-pp1-cp1": (3000, 60),
    "dpr1-dps2-tp2-pp1-cp1": (2000, 30),
    "dpr1-dps2-tp1-pp2-cp1": (2500, 40),
    "dpr1-dps2-tp1-pp1-cp2": (1500, 80),
}


def hybrid_db(tmp_path: Path) -> Path:
    runs = [
        fixtures._run(f"r{i}", "hybrid", f"transformer {text}", strategy="hybrid", nproc=4,
                      tps=tps, layout=text)
        for i, (text, (tps, _)) in enumerate(MEASURED.items())
    ]  # fmt: skip
    path = fixtures.make_db(tmp_path / "h.duckdb", runs)
    con = duckdb.connect(str(path))  # the fixture's schema is version 1: add what came later
    con.execute("ALTER TABLE results ADD COLUMN state_bytes BIGINT")
    con.execute(
        "CREATE TABLE comm_records (run_id VARCHAR, repeat INTEGER, rank INTEGER, dim VARCHAR,"
        " op VARCHAR, calls BIGINT, bytes BIGINT, seconds DOUBLE, wait_s DOUBLE)"
    )
    for i, (_, mib) in enumerate(MEASURED.values()):
        con.execute(
            "UPDATE results SET state_bytes = ?, wait_energy_j = 1.0, wait_fraction = 0.1,"
            " step_times_s = '[1.0, 1.0]' WHERE run_id = ?",
            [mib * 2**20, f"r{i}"],
        )
        for rank in range(4):
            con.execute(
                "INSERT INTO comm_records (run_id, repeat, rank, dim, op, calls, bytes, seconds,"
                " wait_s) VALUES (?, 0, ?, 'tp', 'all_reduce', 4, ?, 0.1, 0.0)",
                [f"r{i}", rank, 2 * 2**20],
            )
    con.close()
    return path


def test_layouts_are_classified_by_their_model_parallel_degrees():
    assert kind("dpr4-dps1-tp1-pp1-cp1") == "dp"
    assert kind("dpr1-dps2-tp2-pp1-cp1") == "tp"
    assert kind("dpr1-dps1-tp2-pp2-cp1") == "mixed"


def test_the_table_ranks_layouts_and_says_where_the_findings_hold(tmp_path: Path):
    db = hybrid_db(tmp_path)
    table = read_layouts(db)
    assert list(table["layout"]) == [
        "dpr4-dps1-tp1-pp1-cp1", "dpr1-dps2-tp1-pp2-cp1", "dpr1-dps2-tp2-pp1-cp1",
        "dpr1-dps2-tp1-pp1-cp2",
    ]  # fmt: skip
    text = "\n".join(section(db))
    assert "study: DP gives the highest MFU — here: agrees; the highest tokens/s is dpr4" in text
    assert (
        "study: TP gives the lowest memory — here: agrees; the lowest model state is dps2-tp2"
        in text
    )
    assert "dps2-pp2 is #2 of 4 by tokens/s and #2 by memory" in text
    assert "| dps2-tp2 | hybrid | 2,000 |" in text
    assert "| tp 1.0 |" in text  # MiB per rank and step: 2 MiB per rank over a 2-step repeat


def test_no_section_without_hybrid_runs(tmp_path: Path):
    path = fixtures.make_db(tmp_path / "n.duckdb", [fixtures._run("s", "smoke", "single")])
    assert section(path) == []
