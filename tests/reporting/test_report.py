"""greenbench.reporting.report: a populated database gives Markdown whose links are real PNGs."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

import greenbench
from greenbench.errors import StoreError
from greenbench.reporting.report import write_report

SCHEMA = Path(greenbench.__file__).with_name("store_schema.sql")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(run_id: str, workload: str, name: str, **kw: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "suite": "smoke",
        "workload": workload,
        "config_name": name,
        "config_key": f"key-{name}",
        "config": "{}",
        "model_family": kw.pop("family", "transformer"),
        "model_size": "tiny",
        "strategy": kw.pop("strategy", "single"),
        "layout": "dp1",
        "device": "cpu",
        "device_type": "cpu:test",
        "nproc": kw.pop("nproc", 1),
        "nnodes": 1,
        "precision": "fp32",
        "seq_len": kw.pop("seq_len", 128),
        "lengths": "fixed",
        "energy_source": kw.get("source", "estimate"),
        "energy_measured": kw.get("source", "estimate") != "estimate",
        "status": "ok",
        "git_sha": kw.pop("sha", "abc123"),
        "host": "testhost",
        "peak_flops_source": "cpu-gemm-calibration",
        **{k: v for k, v in kw.items() if k not in {"source", "jpt", "tps"}},
        "_jpt": kw.get("jpt", 1.0),
        "_tps": kw.get("tps", 1000.0),
    }


def make_db(path: Path, runs: list[dict[str, Any]], repeats: int = 3) -> Path:
    rng = np.random.default_rng(0)
    con = duckdb.connect(str(path))
    con.execute(SCHEMA.read_text())
    for i, run in enumerate(runs):
        jpt, tps = run.pop("_jpt"), run.pop("_tps")
        run["started_at"] = datetime(2026, 1, 1) + timedelta(minutes=i)
        cols = list(run)
        con.execute(
            f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [run[c] for c in cols],
        )
        for rep in range(repeats):
            j = jpt * rng.lognormal(0, 0.02)
            con.execute(
                "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, energy_source,"
                " energy_measured, joules_per_token, energy_j, mfu, peak_mem_bytes)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run["run_id"], rep, 4096, 4096 / tps, tps, run["energy_source"],
                 run["energy_measured"], j, j * 4096, 0.12, 300 * 2**20],
            )  # fmt: skip
    con.close()
    return path


@pytest.fixture
def populated_db(tmp_path: Path) -> Path:
    runs = [
        _run(f"tm{i}", "transformer-vs-mamba", f"{fam}/tiny seq={s}", family=fam, seq_len=s,
             jpt=(1.0 if fam == "transformer" else 1.2) * s / 128, tps=2000 * 128 / s)
        for i, (fam, s) in enumerate(
            [(f, s) for f in ("transformer", "mamba") for s in (128, 256, 512)]
        )
    ]  # fmt: skip
    runs += [
        _run("fo1", "fsdp-vs-odc", "fsdp ×2", strategy="fsdp", nproc=2, jpt=2.0, tps=900),
        _run("fo2", "fsdp-vs-odc", "odc ×2", strategy="odc", nproc=2, jpt=1.7, tps=1100),
        _run("fo3", "fsdp-vs-odc", "odc ×2", strategy="odc", nproc=2, jpt=1.1, tps=1300,
             source="rapl"),
        # an older commit of the same configuration: the report must show the newest only
        _run("old", "fsdp-vs-odc", "fsdp ×2", strategy="fsdp", nproc=2, jpt=9.0, tps=100,
             sha="old999"),
    ]  # fmt: skip
    runs.insert(0, runs.pop())  # started first
    return make_db(tmp_path / "g.duckdb", runs)


def test_report_links_existing_pngs(populated_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "reports" / "ref"
    path = write_report(populated_db, out, title="Test report")
    assert path == out / "README.md"
    text = path.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert {"pareto.png", "transformer-vs-mamba-seq-len.png"} <= set(links)
    assert "workload-fsdp-vs-odc.png" in links
    for link in links:
        png = out / link
        assert png.is_file() and png.read_bytes()[:8] == PNG_MAGIC, link


def test_report_labels_energy_and_keeps_sources_apart(populated_db: Path, tmp_path: Path) -> None:
    text = write_report(populated_db, tmp_path / "r").read_text()
    assert "measured and some estimated" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| fsdp-vs-odc")]
    assert len(rows) == 3  # fsdp (newest commit only), odc estimate, odc measured
    assert any("measured (rapl)" in r for r in rows) and any("estimate" in r for r in rows)
    assert "| 9 [" not in text  # the old commit's J/token is not shown
    # one front per workload and energy source; transformer seq=128 is fastest and leanest
    assert (
        "- Pareto front, `transformer-vs-mamba`, energy estimate: `transformer/tiny seq=128`\n"
        in text
    )
    assert "- Pareto front, `fsdp-vs-odc`, energy measured (rapl): `odc ×2`" in text
    assert "- Pareto front, `fsdp-vs-odc`, energy estimate: `odc ×2`" in text
    # an estimated front is said to be a speed ranking; a measured one is not
    front = text.split("- Pareto front, `fsdp-vs-odc`, energy estimate: `odc ×2`\n")[1]
    assert front.startswith("  - its J/token is an estimate: time × modelled power")
    measured = text.split("- Pareto front, `fsdp-vs-odc`, energy measured (rapl): `odc ×2`\n")
    assert not measured[1].startswith("  - its J/token is an estimate")


def test_report_for_an_all_estimate_cpu_database(tmp_path: Path) -> None:
    db = make_db(tmp_path / "e.duckdb", [_run("a1", "hybrid", "dp2", nproc=2)])
    text = write_report(db, tmp_path / "r", title="CPU").read_text()
    assert "Every energy figure in this report is an estimate" in text
    assert "CPU-only results (no GPU). MFU is relative to the peak FLOP/s from: cpu-gemm" in text


def test_report_can_be_limited_to_a_ref(populated_db: Path, tmp_path: Path) -> None:
    text = write_report(populated_db, tmp_path / "r", ref="old").read_text()
    assert "transformer-vs-mamba" not in text and "fsdp ×2" in text


def test_report_on_an_empty_database(tmp_path: Path) -> None:
    db = make_db(tmp_path / "empty.duckdb", [])
    with pytest.raises(StoreError, match="no finished runs"):
        write_report(db, tmp_path / "r")


def test_report_on_the_seeded_database(seeded_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "seeded"
    text = write_report(seeded_db, out, title="seeded").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert "workload-data-parallel.png" in links and "pareto.png" in links
    assert all((out / link).read_bytes()[:8] == PNG_MAGIC for link in links)
    assert "measured (rapl)" in text and "estimate" in text


def test_multi_rank_configurations_report_their_waiting(seeded_db: Path, tmp_path: Path) -> None:
    text = write_report(seeded_db, tmp_path / "w", title="w").read_text()
    section = text.split("## Workload `data-parallel`")[1].split("## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| transformer")]
    assert "Waiting for other ranks" in section and len(rows) == 2  # ddp×2 and fsdp×2
    for row in rows:
        fraction = float(row.split("|")[2].split()[0])
        assert 0 < fraction < 1  # seeded: rank 1 waits 25 % of its window
    single = text.split("## Workload `transformer-vs-mamba`")[1]
    assert "Waiting for other ranks" not in single


# --- trust: what an interval is, and runs that shared the machine ------------------------------


def _figure_texts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every title, axis label and legend text of the PNGs the report draws, as it saves them."""
    from greenbench.reporting import figures

    texts: list[str] = []
    save = figures.save

    def keep(fig: Any, path: Path) -> None:
        for ax in fig.axes:
            texts.extend([ax.get_title(), ax.get_xlabel(), ax.get_ylabel()])
            legend = ax.get_legend()
            texts.extend(t.get_text() for t in (legend.get_texts() if legend else []))
        texts.extend(t.get_text() for t in fig.texts)
        save(fig, path)

    monkeypatch.setattr(figures, "save", keep)
    return texts


def test_two_repeats_are_a_min_max_range_never_called_a_95_ci(
    populated_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = make_db(tmp_path / "two.duckdb", [
        _run(f"tm{i}", "transformer-vs-mamba", f"{fam}/tiny seq={s}", family=fam, seq_len=s)
        for i, (fam, s) in enumerate([("transformer", 128), ("transformer", 256), ("mamba", 128)])
    ], repeats=2)  # fmt: skip
    drawn = _figure_texts(monkeypatch)
    text = write_report(db, tmp_path / "rep").read_text()
    for words in (text, *drawn):
        assert not re.search(r"95 ?% CI", words), words
    assert "J/token (median [interval])" in text
    assert "min–max range of the repeats, not a CI (a CI needs ≥ 6 repeats)" in text
    assert any("min–max range" in t for t in drawn if "J/token" in t or "energy" in t)
    assert "min–max of 2" in text  # each row's trust cell


def test_six_repeats_are_a_95_percent_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = make_db(tmp_path / "six.duckdb", [
        _run("a1", "transformer-vs-mamba", "transformer/tiny seq=128"),
        _run("a2", "transformer-vs-mamba", "mamba/tiny seq=128", family="mamba"),
    ], repeats=6)  # fmt: skip
    drawn = _figure_texts(monkeypatch)
    text = write_report(db, tmp_path / "rep").read_text()
    assert "Interval: 95 % CI of the median." in text
    assert any("95 % CI" in t for t in drawn) and not any("min–max" in t for t in drawn)


def test_a_contended_configuration_is_marked_in_the_report(tmp_path: Path) -> None:
    db = make_db(tmp_path / "busy.duckdb", [
        _run("c1", "transformer-vs-mamba", "transformer/tiny seq=128"),
        _run("c2", "transformer-vs-mamba", "mamba/tiny seq=128", family="mamba", jpt=0.5),
    ])  # fmt: skip
    con = duckdb.connect(str(db))  # as a migrated database holds it
    con.execute("ALTER TABLE runs ADD COLUMN contended BOOLEAN")
    con.execute("ALTER TABLE runs ADD COLUMN others_busy_cores DOUBLE")
    con.execute("UPDATE runs SET contended = (run_id = 'c2'), others_busy_cores = 1.4")
    con.close()
    text = write_report(db, tmp_path / "rep").read_text()
    (row,) = [
        line for line in text.splitlines() if line.startswith("| transformer-vs-mamba | mamba")
    ]
    assert "⚠ contended" in row
    (clean,) = [line for line in text.splitlines()
                if line.startswith("| transformer-vs-mamba | transformer")]  # fmt: skip
    assert "contended" not in clean
    assert "1 of 2 configurations measured while the machine was shared" in text
    # estimated energy: the lowest J/token is labelled as following time, never a finding
    assert "- Fewest J/token" not in text
    fewest = next(line for line in text.splitlines() if line.startswith("- Lowest estimated"))
    assert "`mamba/tiny seq=128`" in fewest and fewest.endswith(", ⚠ contended)")
    assert "time × modelled power, so it ranks as time does" in fewest
    assert "an energy ratio here is a time ratio" in text
    assert "other processes kept 1.40 cores busy" in text
