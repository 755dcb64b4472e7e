"""greenbench.reporting.comm_efficient and its report section: each DDP method named from its
settings, bytes per step read from the stored communication records, ratios against DDP at the
same rank count and link, energy to a target pooled over seeds with a method that never reached
it kept, the statements computed ("cannot tell" where intervals overlap) and the PNG written;
runs written by the real Store."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from comm_helpers import (
    BF16,
    COMPRESS,
    DILOCO,
    LOCAL,
    MIB,
    POWERSGD,
    SLOW,
    STALENESS,
    STEPS,
    SYNC,
    target_runs,
    write_db_with_both,
)
from target_helpers import seeds, write_db

from greenbench.reporting.comm_efficient import (
    DDP,
    OWN_TRANSPORT,
    link_of,
    method_of,
    read_methods,
    read_targets,
    with_bytes,
)
from greenbench.reporting.report import write_report
from greenbench.reporting.sections.comm_efficient import PNG, TITLE, section_lines

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_each_method_is_named_from_its_settings():
    assert method_of({}) == DDP
    assert method_of({COMPRESS: "none", SYNC: "every-step", STALENESS: 0}) == DDP
    assert method_of(BF16) == "bf16"
    assert method_of({COMPRESS: "fp16"}) == "fp16"
    assert method_of(POWERSGD) == "PowerSGD r=4"
    assert method_of({COMPRESS: "powersgd"}) == "PowerSGD r=1"  # the rank's default
    assert method_of(LOCAL) == "local SGD H=16"
    assert method_of(DILOCO) == "DiLoCo H=16"
    assert method_of({STALENESS: 1}) == "staleness 1"
    assert link_of({"strategy": "ddp"}) == OWN_TRANSPORT
    assert link_of(SLOW) == "emulated link 10 ms, 1 Gb/s"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return write_db_with_both(tmp_path / "c.duckdb")


def _row(methods: pd.DataFrame, method: str, link: str = OWN_TRANSPORT) -> pd.Series:
    found = methods[(methods["method"] == method) & (methods["link"] == link)]
    assert len(found) == 1, (method, link)
    return found.iloc[0]


# ------------------------------------------------------------------------------ per step


def test_bytes_per_step_come_from_the_communication_records(db: Path):
    methods = read_methods(db)
    assert len(methods) == 8  # the older DDP run is not one of them
    ddp = _row(methods, DDP)
    # each rank's records summed (all-reduce and broadcast), ÷ 16 steps, averaged over ranks
    assert ddp["bytes_per_step"] == pytest.approx((16 + 20) / 2 * MIB / STEPS)
    assert ddp["step_s"] == pytest.approx(1.65 / STEPS)  # the median repeat's seconds ÷ steps
    assert ddp["wait_share"] == pytest.approx(0.1)
    assert ddp["energy"] == "measured (rapl)" and ddp["repeats"] == 2
    assert ddp["joules_per_token"] == pytest.approx(2 * 20.0 * 1.65 / (2 * STEPS * 1024))


def test_each_method_is_set_against_ddp_at_the_same_rank_count_and_link(db: Path):
    methods = read_methods(db)
    assert _row(methods, "bf16")["bytes_fewer"] == pytest.approx(2.0)
    assert _row(methods, "PowerSGD r=4")["bytes_fewer"] == pytest.approx(144.0)
    assert _row(methods, "staleness 1")["bytes_fewer"] == pytest.approx(1.0)
    assert _row(methods, "bf16")["step_ratio"] == pytest.approx(1.25 / 1.65)
    slow = "emulated link 10 ms, 1 Gb/s"
    local = _row(methods, "local SGD H=16", slow)
    assert local["step_ratio"] == pytest.approx(2.05 / 8.2)  # against DDP over the same link
    assert local["step_verdict"].word == "less"
    overlapping = _row(methods, "bf16", slow)["step_verdict"]
    assert (overlapping.word, overlapping.why) == ("cannot tell", "the intervals overlap")


# ------------------------------------------------------------------------------ to a target


def test_energy_to_target_pools_the_seeds_and_keeps_a_method_that_never_reached(db: Path):
    targets = read_targets(db).set_index("method")
    assert list(targets.index) == [DDP, "PowerSGD r=4", "local SGD H=16", "DiLoCo H=16"]
    assert targets.loc[DDP, "energy_to_target_j"] == pytest.approx(110.0)  # not the other DDP
    assert targets.loc["PowerSGD r=4", "energy_to_target_j_low"] == 60.0
    diloco = targets.loc["DiLoCo H=16"]
    assert (diloco["n_reached"], diloco["n_seeds"]) == (0, 2)
    assert diloco["per_seed"] == "seed 0: not reached (best 4.2); seed 1: not reached (best 4.31)"
    assert diloco["budget_j"] == pytest.approx(620.0)  # the median of what its seeds spent
    assert targets.loc[DDP, "per_seed"] == "seed 0: 100 J; seed 1: 120 J"
    placed = with_bytes(read_targets(db), read_methods(db)).set_index("method")
    assert placed.loc["PowerSGD r=4", "bytes_per_step"] == pytest.approx(MIB / 8 / STEPS)
    # local SGD ran over the emulated link only: its bytes are the same there
    assert placed.loc["local SGD H=16", "bytes_per_step"] == pytest.approx(MIB / STEPS)
    assert placed.loc["DiLoCo H=16", "bytes_per_step"] == pytest.approx(MIB / 2 / STEPS)
    unmeasured = with_bytes(read_targets(db), read_methods(db).iloc[0:0])
    assert unmeasured["bytes_per_step"].isna().all()


# ------------------------------------------------------------------------------ the section


def test_the_section_says_what_the_runs_show_and_draws_the_png(db: Path, tmp_path: Path):
    lines = section_lines(read_methods(db), read_targets(db), tmp_path)
    text = "\n".join(lines)
    assert f"## {TITLE}" in text
    assert "| bf16 | 576 KiB | ×2 fewer | 78.12 ms (×0.76) |" in text
    assert "0.001526, measured (rapl)" in text  # J/token with its energy label
    assert "bf16 ×2, PowerSGD r=4 ×144, local SGD H=16 ×18, DiLoCo H=16 ×36 fewer" in text
    assert "as many as DDP: staleness 1" in text
    assert "**faster** than DDP: local SGD H=16 (×0.25 the step time)" in text
    assert "**cannot tell** whether faster than DDP: bf16 (the intervals overlap)" in text
    assert "min–max ranges of as few as 2 repeats" in text
    assert "PowerSGD r=4 at 2 ranks against DDP: **less energy**, **less time**" in text
    assert (
        "local SGD H=16 at 2 ranks against DDP: **cannot tell which spends less energy (the "
        "intervals overlap)**"
    ) in text
    assert "DiLoCo H=16 at 2 ranks against DDP: **more energy**" in text
    assert "its median seed did not reach the target (budget spent: 620 J)" in text
    assert "not reached (best 4.2)" in text and "measured (rapl)" in text
    assert "min–max range of the seeds" in text
    assert (tmp_path / PNG).read_bytes()[:8] == PNG_MAGIC
    assert f"]({PNG})" in text


def test_the_report_writes_the_section_after_energy_to_target(db: Path, tmp_path: Path):
    text = write_report(db, tmp_path / "r", title="t").read_text()
    assert text.index("## Energy to a target loss") < text.index(f"## {TITLE}")
    assert (tmp_path / "r" / PNG).is_file()


def test_a_database_without_these_runs_has_no_section(tmp_path: Path):
    path = write_db(tmp_path / "o.duckdb", seeds("t", {}, [(True, 1.0, 10.0, 0)]))
    assert read_methods(path).empty and read_targets(path).empty
    assert section_lines(read_methods(path), read_targets(path), tmp_path) == []


def test_runs_to_a_target_without_the_comm_runs_get_their_table_and_no_chart(tmp_path: Path):
    path = write_db(tmp_path / "t.duckdb", target_runs())
    text = "\n".join(section_lines(read_methods(path), read_targets(path), tmp_path))
    assert "| DiLoCo H=16 | 2 |" in text and "No chart of bytes per step" in text
    assert not (tmp_path / PNG).exists()
    assert "PowerSGD r=4 at 2 ranks against DDP: **less energy**" in text
