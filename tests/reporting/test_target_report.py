"""The report over runs to a target loss written by the real Store: the section "Energy to a
target loss" with its table (not-reached runs shown by their best loss), what the runs say,
and the Pareto section's time-against-energy-to-target front with SkipPipe's skipping runs
ranked on it; a database without such runs gets neither."""

from __future__ import annotations

from pathlib import Path

from target_helpers import FAST, SLOW, convergence_runs, seeds, write_db

from greenbench.reporting.report import write_report


def report(db: Path, tmp_path: Path) -> str:
    return write_report(db, tmp_path / "report").read_text(encoding="utf-8")


def test_the_section_tables_each_configuration_over_its_seeds(tmp_path: Path):
    text = report(write_db(tmp_path / "t.duckdb", convergence_runs()), tmp_path)
    section = text[text.index("## Energy to a target loss") :]
    assert "| `transformer/tiny seq=128 fixed single×1` | 4 | 2/2 seeds | 110 [100–120] |" in (
        section
    )
    mamba2 = next(line for line in section.splitlines() if "mamba2/tiny" in line)
    assert mamba2.count("not reached (best 4.12)") == 5  # every figure, never a number
    assert "0/2 seeds" in mamba2
    assert "min–max range of the seeds" in section and "wide" in section
    assert "partial model: skips 50% of its stages per token" in section


def test_the_section_says_what_the_runs_show(tmp_path: Path):
    text = report(write_db(tmp_path / "t.duckdb", convergence_runs()), tmp_path)
    said = text[text.index("### What the runs say") :]
    assert "transformer vs mamba vs mamba2" in said
    assert "**transformer** reaches the target first" in said
    assert "SkipPipe skip=0.5 reaches the target with **less time and less energy**" in said
    assert "ddp / fsdp / odc: the largest difference" in said and "within rounding" in said
    assert "of 2 seed(s)" in said


def test_the_pareto_section_ranks_skipping_runs_to_the_target(tmp_path: Path):
    text = report(write_db(tmp_path / "t.duckdb", convergence_runs()), tmp_path)
    pareto = text[text.index("### Time against energy to a target loss") :]
    assert (tmp_path / "report" / "pareto-to-target.png").is_file()
    front = next(line for line in pareto.splitlines() if line.startswith("- Pareto front"))
    assert "skippipe[skippipe 1-2-1 skip=0.5]×4" in front
    assert "ranked on this front, though off the J/token one" in pareto
    assert "not drawn, their median seed did not reach the target: `mamba2/tiny" in pareto


def test_an_estimate_is_labelled(tmp_path: Path):
    runs = [
        *seeds("t", {}, FAST, source="estimate", measured=False),
        *seeds("m", {"model.family": "mamba"}, SLOW, source="estimate", measured=False),
    ]
    text = report(write_db(tmp_path / "t.duckdb", runs), tmp_path)
    section = text[text.index("## Energy to a target loss") :]
    assert "| estimate |" in section
    assert "Energy labelled estimate is an estimate: time × modelled power" in section


def test_a_database_without_runs_to_a_target_has_neither(seeded_db: Path, tmp_path: Path):
    text = report(seeded_db, tmp_path)
    assert "Energy to a target loss" not in text and "pareto-to-target" not in text
