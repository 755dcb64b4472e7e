"""greenbench.reporting.odc: FSDP/ODC pairs, their ratios, and the report's section."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from greenbench.reporting.odc import odc_pairs, read_pairs, read_variants, variant_of
from greenbench.reporting.report import write_report

_spec = importlib.util.spec_from_file_location(
    "report_fixtures", Path(__file__).with_name("test_report.py")
)
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)  # type: ignore[union-attr]


def pair_db(tmp_path: Path, odc_source: str = "estimate") -> Path:
    runs = [
        fixtures._run("f2", "fsdp-vs-odc", "fsdp×2", strategy="fsdp", nproc=2, jpt=2.0, tps=1000),
        fixtures._run("o2", "fsdp-vs-odc", "odc×2", strategy="odc", nproc=2, jpt=1.6, tps=1250),
        fixtures._run(
            "o2b", "fsdp-vs-odc", "odc×2", strategy="odc", nproc=2, jpt=1.5, tps=1400,
            source=odc_source,
        ),  # the newest run of odc×2: the pair takes it
        fixtures._run("f4", "fsdp-vs-odc", "fsdp×4", strategy="fsdp", nproc=4, jpt=3.0, tps=800),
        fixtures._run("s1", "transformer-vs-mamba", "single", jpt=1.0, tps=500),
    ]  # fmt: skip
    return fixtures.make_db(tmp_path / "odc.duckdb", runs)


def _config(**settings: object) -> str:
    return json.dumps({"workload": "fsdp-vs-odc", "settings": settings})


def variants_db(tmp_path: Path) -> Path:
    shm = fixtures._run("b", "fsdp-vs-odc", "fsdp-shm×2", strategy="fsdp", nproc=2, tps=1200)
    shm["config"] = _config(strategy="fsdp", **{"fsdp.transport": "shared-memory"})
    lock = fixtures._run("c", "fsdp-vs-odc", "odc-lock×2", strategy="odc", nproc=2, tps=1300)
    lock["config"] = _config(strategy="odc", **{"odc.meet": "microbatch"})
    runs = [
        fixtures._run("a", "fsdp-vs-odc", "fsdp×2", strategy="fsdp", nproc=2, tps=1000),
        shm,
        lock,
        fixtures._run("d", "fsdp-vs-odc", "odc×2", strategy="odc", nproc=2, tps=1400),
    ]
    return fixtures.make_db(tmp_path / "variants.duckdb", runs)


def test_the_variants_between_fsdp_and_odc_stay_out_of_the_pairs(tmp_path: Path):
    db = variants_db(tmp_path)
    pairs = read_pairs(db)
    assert len(pairs) == 1
    assert pairs.iloc[0].speedup == pytest.approx(1400 / 1000)  # stock FSDP2 against ODC
    variants = read_variants(db)
    assert list(variants.variant) == ["fsdp", "fsdp-shm", "odc-lockstep", "odc"]
    assert list(variants.tokens_per_s) == pytest.approx([1000, 1200, 1300, 1400], rel=0.05)


def test_a_configuration_stored_before_the_variants_reads_as_stock():
    assert variant_of("fsdp", "{}") == "fsdp"
    assert variant_of("odc", _config(strategy="odc")) == "odc"
    assert variant_of("fsdp", _config(**{"fsdp.transport": "gloo"})) == "fsdp"


def test_pairs_take_the_newest_run_of_each_side_and_divide_odc_by_fsdp(tmp_path: Path):
    pairs = read_pairs(pair_db(tmp_path))
    assert len(pairs) == 1  # fsdp×4 has no odc partner, the other workload is not paired
    row = pairs.iloc[0]
    assert row.nproc == 2 and row.lengths == "fixed"
    assert row.speedup == pytest.approx(1400 / 1000)
    assert row.energy_ratio == pytest.approx(1.5 / 2.0, rel=0.1)  # jitter of the fixture
    assert row.odc_repeats == 3  # the three repeats of the newest run only


def test_a_pair_metered_two_ways_shows_no_energy_ratio(tmp_path: Path):
    pairs = read_pairs(pair_db(tmp_path, odc_source="rapl"))
    assert pd.isna(pairs.iloc[0].energy_ratio)
    assert pairs.iloc[0].speedup == pytest.approx(1.4)


def test_no_pairs_without_both_strategies():
    rows = pd.DataFrame(
        {
            "run_id": ["a"], "config_key": ["k"], "workload": ["fsdp-vs-odc"],
            "strategy": ["fsdp"], "started_at": [pd.Timestamp(0)], "energy_source": ["estimate"],
            "energy_measured": [False], "peak_mem_bytes": [1], "model_family": ["transformer"],
            "model_size": ["tiny"], "seq_len": [1], "lengths": ["fixed"], "nproc": [2],
            "rank_cpu_quota": [None], "tokens_per_s": [1.0], "wait_fraction": [0.1],
            "joules_per_token": [1.0], "wait_energy_j": [1.0],
        }
    )  # fmt: skip
    assert odc_pairs(rows).empty
    assert odc_pairs(rows.iloc[:0]).empty


def test_the_report_has_the_odc_table_and_plot(tmp_path: Path):
    readme = write_report(pair_db(tmp_path), tmp_path / "report")
    text = readme.read_text()
    assert "## FSDP vs ODC" in text
    assert "| 2 ranks | fixed | 1,000 | 1,400 | **1.40** |" in text
    assert (readme.parent / "fsdp-vs-odc.png").read_bytes().startswith(b"\x89PNG")


def test_the_report_decomposes_odc_over_fsdp_where_the_variants_are_stored(tmp_path: Path):
    text = write_report(variants_db(tmp_path), tmp_path / "report").read_text()
    assert "### Where ODC's lead comes from" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| 2 ranks | fixed | 1,000 |")
              and "1,200" in line]  # fmt: skip
    # transport 1200/1000, engine 1300/1200, balancing 1400/1300, product 1400/1000
    assert row.endswith("| 1.20 | 1.08 | **1.08** | 1.40 |")
    # without the variants: the pairs' table alone
    plain = write_report(pair_db(tmp_path), tmp_path / "plain").read_text()
    assert "## FSDP vs ODC" in plain and "Where ODC's lead comes from" not in plain
