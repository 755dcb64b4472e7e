"""Tests of greenbench.compare: the rule, like-with-like grouping, REFs and the CLI shell."""

from __future__ import annotations

import dataclasses
import io
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest

import greenbench
from greenbench import stats
from greenbench.compare import (
    compare,
    compare_cli,
    compare_history,
    delta_for,
    load_ref,
    parse_metrics,
    parse_threshold,
    render_json,
    render_markdown,
)
from greenbench.errors import SpecError
from greenbench.reporting.refs import latest_sha_per_config

SCHEMA = Path(greenbench.__file__).with_name("store_schema.sql")
_TEMPLATE = pd.DataFrame(
    {
        "run_id": "r0",
        "workload": "transformer-vs-mamba",
        "config_name": "transformer/tiny seq=128 single×1",
        "config_key": "k1",
        "energy_source": "estimate",
        "energy_measured": False,
        "device_type": "cpu:test",
        "nproc": 1,
        "nnodes": 1,
        "precision": "fp32",
        "joules_per_token": [1.0] * 7,
        "tokens_per_s": 1000.0,
    }
)


def frame(jpt: Any, **cols: Any) -> pd.DataFrame:
    """Per-repeat rows of one configuration with the given J/token values."""
    values = np.asarray(jpt, dtype=float)
    df = _TEMPLATE.iloc[[0] * len(values)].reset_index(drop=True)
    df["joules_per_token"] = values
    for k, v in cols.items():
        df[k] = v
    return df


# --- the statistical requirement ------------------------------------------------------------


def test_power_and_false_alarm() -> None:
    """7 vs 7 repeats, 2 % lognormal noise: +8 % J/token caught ≥ 95 %, A/A alarms ≤ 1 %."""
    rng = np.random.default_rng(20260101)
    trials, sigma = 1000, 0.02
    detected = false_alarms = 0
    for _ in range(trials):
        base = rng.lognormal(0.0, sigma, 7)
        slow = rng.lognormal(np.log(1.08), sigma, 7)
        same = rng.lognormal(0.0, sigma, 7)
        detected += compare(frame(base), frame(slow)).exit_code == 3
        false_alarms += compare(frame(base), frame(same)).exit_code == 3
    print(f"detection {detected / trials:.1%}, false alarms {false_alarms / trials:.1%}")
    assert detected / trials >= 0.95
    assert false_alarms / trials <= 0.01


# --- the rule ---------------------------------------------------------------------------------


def test_clear_regression_row_fields() -> None:
    v = compare(frame([1.0, 1.01, 0.99, 1.0, 1.02]), frame([1.2, 1.21, 1.19, 1.2, 1.22]))
    (row,) = v.rows
    assert row.status == "regression" and row.symbol == "+" and v.exit_code == 3
    assert row.ratio == pytest.approx(1.2)
    assert row.p_worse == pytest.approx(stats.min_p_value(5, 5))
    assert row.energy_label == "estimate"


def test_improvement_is_reported_with_exit_0() -> None:
    v = compare(frame([1.0] * 3 + [1.01] * 4), frame([0.8, 0.81, 0.79, 0.8, 0.82, 0.8, 0.8]))
    assert v.rows[0].status == "improvement" and v.rows[0].symbol == "-"
    assert v.exit_code == 0


def test_small_change_is_not_a_regression_even_if_significant() -> None:
    base = [1.0, 1.001, 1.002, 1.003, 1.004, 1.005, 1.006]
    v = compare(frame(base), frame([x * 1.03 for x in base]))
    row = v.rows[0]
    assert row.p_worse_holm < 0.01 and row.status == "unchanged" and v.exit_code == 0


def test_large_but_noisy_change_is_not_significant() -> None:
    base = [1.0, 1.3, 0.8, 1.1, 0.9, 1.2, 1.05]
    cand = [1.1, 1.35, 0.85, 1.15, 1.2, 1.25, 1.12]
    v = compare(frame(base), frame(cand), cv_cap=1.0)
    assert v.rows[0].ratio > 1.05
    assert v.rows[0].status == "unchanged" and "not significant" in v.rows[0].note


def test_too_few_repeats_is_inconclusive_not_a_pass() -> None:
    v = compare(frame([1.0, 1.01, 0.99]), frame([1.5, 1.51, 1.49]))
    row = v.rows[0]
    assert row.status == "inconclusive" and "need more repeats" in row.note
    assert v.exit_code == 0
    strict = compare(frame([1.0, 1.01, 0.99]), frame([1.5, 1.51, 1.49]), strict=True)
    assert strict.exit_code == 4


def test_holm_floor_counts_the_number_of_comparisons() -> None:
    # 7 vs 7: min p = 1/3432; 40 comparisons → 40/3432 ≈ 0.0117 ≥ α: nothing can be rejected
    def many(n_configs: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        b = [frame(np.linspace(1, 1.02, 7), config_key=f"k{i}") for i in range(n_configs)]
        c = [frame(np.linspace(1.2, 1.22, 7), config_key=f"k{i}") for i in range(n_configs)]
        return pd.concat(b), pd.concat(c)

    v40 = compare(*many(40))
    assert {r.status for r in v40.rows} == {"inconclusive"}
    v20 = compare(*many(20))
    assert {r.status for r in v20.rows} == {"regression"}


def test_holm_correction_across_the_call() -> None:
    # pooled order of 7 baseline (b) and 7 candidate (c) values, lowest first
    order = "bbbcbbcbbccccc"
    values = 1.0 + 0.03 * np.arange(14)
    b = values[[i for i, s in enumerate(order) if s == "b"]]
    c = values[[i for i, s in enumerate(order) if s == "c"]]
    raw = stats.mannwhitney_greater(c, b)[1]
    assert 0.01 / 2 < raw < 0.01  # significant alone; Holm over three multiplies it by 2 or 3
    alone = compare(frame(b), frame(c))
    assert alone.rows[0].status == "regression"
    sep_b, sep_c = np.linspace(1, 1.02, 7), np.linspace(1.3, 1.32, 7)
    three = compare(
        pd.concat([frame(b), frame(b, config_key="k2"), frame(sep_b, config_key="k3")]),
        pd.concat([frame(c), frame(c, config_key="k2"), frame(sep_c, config_key="k3")]),
    )
    by_key = {r.config_key: r for r in three.rows}
    assert by_key["k3"].status == "regression"
    assert by_key["k1"].status == by_key["k2"].status == "unchanged"
    expected = stats.holm([r.p_worse for r in three.rows])
    assert [r.p_worse_holm for r in three.rows] == pytest.approx(expected)


def test_higher_is_better_metrics() -> None:
    base = frame([1.0] * 7, tokens_per_s=np.linspace(1000, 1010, 7))
    slower = frame([1.0] * 7, tokens_per_s=np.linspace(880, 890, 7))
    faster = frame([1.0] * 7, tokens_per_s=np.linspace(1200, 1210, 7))
    assert compare(base, slower, metrics=["tokens_per_s"]).rows[0].status == "regression"
    assert compare(base, faster, metrics=["throughput"]).rows[0].status == "improvement"


def test_measured_energy_is_never_compared_with_an_estimate() -> None:
    base = frame(np.linspace(1, 1.02, 7), energy_source="rapl", energy_measured=True)
    cand = frame(np.linspace(2, 2.02, 7))
    v = compare(base, cand)
    assert v.rows == ()
    assert {m.side for m in v.mismatches} == {"baseline only", "candidate only"}
    assert all("never compared with an estimate" in m.reason for m in v.mismatches)
    assert v.exit_code == 0
    assert compare(base, cand, strict=True).exit_code == 4


def test_a_simulated_result_is_never_compared_with_a_measurement() -> None:
    measured = frame(np.linspace(1, 1.02, 7), energy_source="rapl", energy_measured=True)
    simulated = frame(np.linspace(0.5, 0.51, 7), energy_source="model", energy_measured=False,
                      device_type="simulated:local")  # fmt: skip
    for base, cand in ((measured, simulated), (simulated, measured)):
        v = compare(base, cand)
        assert v.rows == () and {m.side for m in v.mismatches} == {
            "baseline only",
            "candidate only",
        }
        assert all("simulated result is never compared with a measurement" in m.reason
                   for m in v.mismatches)  # fmt: skip
        assert {m.energy for m in v.mismatches} == {"measured (rapl)", "simulated (model)"}
    assert compare(simulated, simulated).rows[0].status == "unchanged"  # simulated with its own


def test_one_sided_configurations_are_listed() -> None:
    both = np.linspace(1, 1.02, 7)
    v = compare(
        pd.concat([frame(both), frame(both, config_key="only-base", config_name="gone")]),
        pd.concat([frame(both), frame(both, config_key="only-cand", config_name="new")]),
    )
    assert len(v.rows) == 1
    sides = {m.config_name: m.side for m in v.mismatches}
    assert sides == {"gone": "baseline only", "new": "candidate only"}


def test_device_count_difference_is_a_mismatch() -> None:
    v = compare(frame(np.linspace(1, 1.02, 7)), frame(np.linspace(1, 1.02, 7), nproc=2))
    assert v.rows == () and "nproc: 1 vs 2" in v.mismatches[0].reason


def test_unstable_runs_are_flagged() -> None:
    noisy = [1.0, 1.4, 0.7, 1.2, 0.8, 1.3, 0.9]
    v = compare(frame(noisy), frame(noisy), cv_cap=0.10)
    assert v.rows[0].unstable and "unstable" in v.rows[0].note
    assert v.exit_code == 0 and compare(frame(noisy), frame(noisy), strict=True).exit_code == 4


def test_missing_metric_values_are_inconclusive() -> None:
    v = compare(frame([1.0] * 7), frame([np.nan] * 7), strict=True)
    assert v.rows[0].status == "inconclusive" and v.exit_code == 4


def test_delta_lookup_and_threshold_parsing() -> None:
    d = parse_threshold("4%,tokens_per_s=10%,fsdp-vs-odc:energy=8%,hybrid=2%")
    assert d == {
        "*": 0.04,
        "tokens_per_s": 0.10,
        "fsdp-vs-odc:energy_j": 0.08,
        "hybrid": 0.02,
    }
    assert delta_for(d, "fsdp-vs-odc", "energy_j") == 0.08
    assert delta_for(d, "fsdp-vs-odc", "tokens_per_s") == 0.10
    assert delta_for(d, "hybrid", "joules_per_token") == 0.02
    assert delta_for(d, "skippipe", "joules_per_token") == 0.04
    assert parse_threshold(None) == 0.05 and parse_threshold("0.07") == 0.07
    assert parse_threshold(0.03) == 0.03 and parse_threshold(["3%"]) == 0.03
    for bad in ("five", "120%", "5"):
        with pytest.raises(SpecError):
            parse_threshold(bad)


def test_per_workload_delta_changes_the_verdict() -> None:
    base, cand = frame(np.linspace(1, 1.01, 7)), frame(np.linspace(1.07, 1.08, 7))
    assert compare(base, cand).rows[0].status == "regression"
    loose = {"*": 0.05, "transformer-vs-mamba:joules_per_token": 0.10}
    assert compare(base, cand, delta=loose).rows[0].status == "unchanged"


def test_metric_names() -> None:
    assert parse_metrics(None) == ["joules_per_token"]
    assert parse_metrics("energy, step_time") == ["energy_j", "step_time_p50_s"]
    assert parse_metrics(["peak_mem", "mfu"]) == ["peak_mem_bytes", "mfu"]
    with pytest.raises(SpecError, match="unknown metric"):
        parse_metrics("watts")


# --- contended results --------------------------------------------------------------------------


def test_a_contended_side_is_inconclusive_never_a_regression_or_an_improvement() -> None:
    base = frame(np.linspace(1.0, 1.02, 7), run_id=[f"b{i}" for i in range(7)])
    slower = frame(np.linspace(1.2, 1.22, 7), run_id=[f"c{i}" for i in range(7)])
    faster = frame(np.linspace(0.8, 0.82, 7), run_id=[f"c{i}" for i in range(7)])
    busy = [True, False, False, False, False, False, False]  # one run of seven shared the machine
    for cand in (slower.assign(contended=busy), faster.assign(contended=busy)):
        v = compare(base.assign(contended=False), cand)
        (row,) = v.rows
        assert row.status == "inconclusive" and row.symbol == "?" and row.contended
        assert row.note.startswith("contended: candidate 1 of 7 runs")
        assert "--allow-contended" in row.note
        assert v.exit_code == 0 and compare(base, cand, strict=True).exit_code == 4
    # the baseline side counts the same; a run not watched (NULL, an old run) is not contended
    v = compare(base.assign(contended=busy), slower.assign(contended=None), strict=True)
    assert v.rows[0].status == "inconclusive" and "baseline 1 of 7 runs" in v.rows[0].note
    assert v.exit_code == 4
    assert compare(base.assign(contended=None), slower).rows[0].status == "regression"


def test_allow_contended_judges_contended_rows_and_says_so() -> None:
    base = frame(np.linspace(1.0, 1.02, 7))
    cand = frame(np.linspace(1.2, 1.22, 7), contended=True)
    v = compare(base, cand, allow_contended=True)
    (row,) = v.rows
    assert row.status == "regression" and v.exit_code == 3 and row.contended
    assert "contended (allowed): candidate 1 of 1 runs" in row.note
    md = render_markdown(v)
    assert "estimate · ⚠ contended" in md and "regression: contended (allowed)" in md


def test_history_mode_leaves_contended_history_out_and_a_contended_new_result_undecided() -> None:
    rng = np.random.default_rng(9)
    hist = history_frame(12, rng)
    hist["contended"] = hist["run_id"].isin({"h0", "h1"})
    slow = frame(rng.lognormal(np.log(1.10), 0.02, 3), run_id="new",
                 started_at=datetime(2026, 3, 1))  # fmt: skip
    v = compare_history(hist, slow)
    assert v.rows[0].status == "regression" and v.rows[0].n_baseline == 10
    assert "2 contended history runs left out" in v.rows[0].note
    busy = compare_history(hist, slow.assign(contended=True), strict=True)
    assert busy.rows[0].status == "inconclusive" and busy.exit_code == 4
    allowed = compare_history(hist, slow.assign(contended=True), allow_contended=True)
    assert allowed.rows[0].status == "regression" and allowed.rows[0].n_baseline == 12


def test_compare_cli_allow_contended_over_a_database(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from greenbench.cli import main

    flat = list(np.linspace(1.0, 1.02, 7))
    path = make_db(
        tmp_path / "c.duckdb",
        [
            {"run_id": "aaaa00000001", "label": "base", "values": flat},
            {"run_id": "bbbb00000002", "label": "head", "values": [v * 1.2 for v in flat]},
        ],
    )
    con = duckdb.connect(str(path))  # the column a migrated database has
    con.execute("ALTER TABLE runs ADD COLUMN contended BOOLEAN")
    con.execute("UPDATE runs SET contended = (label = 'head')")
    con.close()
    args = ["compare", "--baseline", "base", "--candidate", "head", "--db", str(path)]
    judged = CliRunner().invoke(main, [*args, "--strict", "--format", "json"])
    assert judged.exit_code == 4, judged.output
    (row,) = json.loads(judged.output)["rows"]
    assert row["status"] == "inconclusive" and row["contended"] is True
    assert row["note"].startswith("contended: candidate 1 of 1 runs")
    allowed = CliRunner().invoke(main, [*args, "--strict", "--allow-contended"])
    assert allowed.exit_code == 3, allowed.output


# --- history mode -----------------------------------------------------------------------------


def history_frame(n_runs: int, rng: np.random.Generator, scale: float = 1.0) -> pd.DataFrame:
    t0 = datetime(2026, 1, 1)
    parts = [
        frame(rng.lognormal(np.log(scale), 0.02, 3), run_id=f"h{i}", started_at=t0 + timedelta(i))
        for i in range(n_runs)
    ]
    return pd.concat(parts, ignore_index=True)


def test_history_mode_flags_a_step_and_passes_noise() -> None:
    rng = np.random.default_rng(7)
    hist = history_frame(30, rng)
    now = datetime(2026, 3, 1)
    slow = frame(rng.lognormal(np.log(1.10), 0.02, 3), run_id="new", started_at=now)
    same = frame(rng.lognormal(0, 0.02, 3), run_id="new", started_at=now)
    v = compare_history(hist, slow)
    assert v.mode == "history" and v.rows[0].status == "regression" and v.exit_code == 3
    assert v.rows[0].n_baseline == 30
    assert compare_history(hist, same).exit_code == 0


def test_history_mode_window_and_minimum() -> None:
    rng = np.random.default_rng(8)
    hist = pd.concat([history_frame(70, rng)], ignore_index=True)
    cand = frame([1.0, 1.0, 1.0], run_id="new", started_at=datetime(2026, 6, 1))
    assert compare_history(hist, cand).rows[0].n_baseline == 64
    short = compare_history(history_frame(2, rng), cand, strict=True)
    assert short.rows[0].status == "inconclusive" and short.exit_code == 4
    other = compare_history(hist, frame([1.0] * 3, config_key="new-config"))
    assert other.rows == () and other.mismatches[0].reason == "no history"


# --- REFs and the CLI shell over a database --------------------------------------------------

_RUN_DEFAULTS: dict[str, Any] = {
    "suite": "smoke",
    "workload": "transformer-vs-mamba",
    "config_name": "transformer/tiny seq=128 single×1",
    "config_key": "k1",
    "config": "{}",
    "model_family": "transformer",
    "model_size": "tiny",
    "strategy": "single",
    "layout": "dp1",
    "device": "cpu",
    "device_type": "cpu:test",
    "nproc": 1,
    "nnodes": 1,
    "precision": "fp32",
    "seq_len": 128,
    "lengths": "fixed",
    "energy_source": "estimate",
    "energy_measured": False,
    "status": "ok",
}


def make_db(path: Path, runs: list[dict[str, Any]]) -> Path:
    """A schema-v1 database holding ``runs``; each run dict carries its J/token ``values``."""
    con = duckdb.connect(str(path))
    con.execute(SCHEMA.read_text())
    for i, spec in enumerate(runs):
        run = {**_RUN_DEFAULTS, "started_at": datetime(2026, 1, 1) + timedelta(hours=i), **spec}
        values = run.pop("values")
        cols = list(run)
        con.execute(
            f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [run[c] for c in cols],
        )
        for rep, jpt in enumerate(values):
            con.execute(
                "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, energy_source,"
                " energy_measured, joules_per_token, energy_j) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run["run_id"], rep, 1000, 1.0, 1000.0 / jpt, run["energy_source"],
                 run["energy_measured"], jpt, jpt * 1000],
            )  # fmt: skip
    con.close()
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    flat = list(np.linspace(1.0, 1.02, 7))
    return make_db(
        tmp_path / "g.duckdb",
        [
            {"run_id": "aaaa00000001", "label": "main", "git_sha": "1111aaaa", "values": flat},
            {"run_id": "aaaa00000002", "label": "main", "git_sha": "2222bbbb", "values": flat},
            {"run_id": "bbbb00000003", "label": "pr", "git_sha": "3333cccc",
             "values": [v * 1.2 for v in flat]},
            {"run_id": "cccc00000004", "label": "pr-same", "git_sha": "4444dddd", "values": flat},
            {"run_id": "dddd00000005", "label": "broken", "git_sha": "5555eeee", "values": [],
             "status": "failed"},
        ],
    )  # fmt: skip


def test_load_ref_resolution(db: Path) -> None:
    assert set(load_ref(db, "aaaa00000001")["run_id"]) == {"aaaa00000001"}
    assert load_ref(db, "aaaa00000001").attrs["ref_kind"] == "run"
    assert set(load_ref(db, "main")["run_id"]) == {"aaaa00000001", "aaaa00000002"}
    assert load_ref(db, "main").attrs["ref_kind"] == "label"
    assert set(load_ref(db, "3333cccc")["run_id"]) == {"bbbb00000003"}
    assert set(load_ref(db, "bbbb")["run_id"]) == {"bbbb00000003"}  # run id prefix
    assert load_ref(db, "3333").attrs["ref_kind"] == "sha"  # sha prefix
    assert len(load_ref(db, "main")) == 14
    with pytest.raises(SpecError, match="ambiguous"):
        load_ref(db, "aaaa")
    with pytest.raises(SpecError, match="matches no run"):
        load_ref(db, "nothing-like-this")
    with pytest.raises(SpecError, match="none finished ok"):
        load_ref(db, "broken")


def test_label_spanning_commits_uses_the_newest(db: Path) -> None:
    newest = latest_sha_per_config(load_ref(db, "main"))
    assert set(newest["git_sha"]) == {"2222bbbb"}


@pytest.mark.parametrize("suffix", [".csv", ".json", ".parquet"])
def test_exported_files_are_refs(db: Path, tmp_path: Path, suffix: str) -> None:
    df = load_ref(db, "pr")
    path = tmp_path / f"export{suffix}"
    if suffix == ".csv":
        df.to_csv(path, index=False)
    elif suffix == ".json":
        df.to_json(path, orient="records", date_format="iso")
    else:
        df.to_parquet(path)
    back = load_ref(db, str(path))
    assert back.attrs["ref_kind"] == "file" and len(back) == 7
    assert compare(load_ref(db, "pr-same"), back).exit_code == 3


def test_exported_file_without_key_columns_is_rejected(tmp_path: Path, db: Path) -> None:
    path = tmp_path / "bad.csv"
    pd.DataFrame({"run_id": ["x"], "joules_per_token": [1.0]}).to_csv(path, index=False)
    with pytest.raises(SpecError, match="lacks columns"):
        load_ref(db, str(path))


def test_compare_cli_exit_codes_and_formats(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    out = io.StringIO()
    assert compare_cli(db, "main", "pr", out=out) == 3
    text = out.getvalue()
    assert "regression" in text and "+20.0%" in text and "exit 3" in text
    assert "spans several commits" in text  # label main held two shas

    out = io.StringIO()
    assert compare_cli(db, "main", "pr-same", fmt="json", out=out) == 0
    doc = json.loads(out.getvalue())
    assert doc["exit_code"] == 0 and doc["rows"][0]["symbol"] == "~"

    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = io.StringIO()
    assert compare_cli(db, "main", "pr", fmt="markdown", out=out) == 3
    assert summary.read_text().startswith("earlier step\n### greenbench compare: REGRESSION")
    assert "| + |" in out.getvalue()

    assert compare_cli(db, "main", "nope", out=io.StringIO()) == 2
    assert compare_cli(db, "main", "pr", metrics="watts", out=io.StringIO()) == 2
    assert compare_cli(db, "main", "pr", fmt="yaml", out=io.StringIO()) == 2
    assert compare_cli(db, "pr", "pr", out=io.StringIO()) == 2  # baseline = candidate
    assert compare_cli(tmp_path / "missing.duckdb", "a", "b", out=io.StringIO()) == 2
    assert "error:" in capsys.readouterr().err


def test_compare_cli_history_excludes_the_candidate(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    runs = [
        {"run_id": f"h{i:011d}", "label": "main", "git_sha": f"sha{i}",
         "values": list(rng.lognormal(0, 0.02, 3))}
        for i in range(10)
    ]  # fmt: skip
    runs.append({"run_id": "newrun000001", "label": "main", "git_sha": "shanew",
                 "values": [1.15, 1.16, 1.14]})  # fmt: skip
    path = make_db(tmp_path / "h.duckdb", runs)
    out = io.StringIO()
    assert compare_cli(path, "main", "newrun000001", history=True, fmt="json", out=out) == 3
    row = json.loads(out.getvalue())["rows"][0]
    assert row["n_baseline"] == 10 and row["status"] == "regression"
    # the branch label may name the candidate too: its newest run is the new result
    out = io.StringIO()
    assert compare_cli(path, "main", "main", history=True, fmt="json", out=out) == 3
    assert json.loads(out.getvalue())["rows"][0]["n_baseline"] == 10
    assert compare_cli(path, None, "newrun000001", history=True, out=io.StringIO()) == 2


def test_renderers_show_symbols_and_mismatches() -> None:
    v = compare(
        pd.concat([frame(np.linspace(1, 1.02, 7)), frame([1.0] * 7, config_key="gone")]),
        frame(np.linspace(1.2, 1.22, 7)),
    )
    md = render_markdown(v)
    assert "| + |" in md and "baseline only" in md and "Exit code 3" in md
    doc = json.loads(render_json(v))
    assert doc["mismatches"][0]["side"] == "baseline only"


# --- against the shared seeded database (tests/conftest.py) -----------------------------------


def test_seeded_feature_against_main(seeded_db: Path) -> None:
    out = io.StringIO()
    assert compare_cli(seeded_db, "main", "feature", fmt="json", out=out) == 0
    doc = json.loads(out.getvalue())
    # only the two ok feature configurations meet their main twins; 3 vs 3 repeats can never
    # reach α (smallest p 1/C(6,3) = 0.05), so even the +10 % transformer is inconclusive
    assert len(doc["rows"]) == 2
    assert {r["status"] for r in doc["rows"]} == {"inconclusive"}
    by_family = {r["config_name"].split("/")[0]: r for r in doc["rows"]}
    assert by_family["transformer"]["ratio"] == pytest.approx(1.10, abs=0.03)
    assert by_family["mamba"]["ratio"] == pytest.approx(1.0, abs=0.03)
    assert {m["side"] for m in doc["mismatches"]} == {"baseline only"}
    assert len(doc["mismatches"]) == 7  # other seq_lens, the rapl run, ddp and fsdp
    strict = compare_cli(seeded_db, "main", "feature", strict=True, out=io.StringIO())
    assert strict == 4
    # a sha prefix names the same runs as the label
    assert compare_cli(seeded_db, "3f2c9e1b", "9d8c7b6a", strict=True, out=io.StringIO()) == 4


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_greenbench_export_files_are_refs(seeded_db: Path, tmp_path: Path, fmt: str) -> None:
    from greenbench.store import export

    (path,) = export(seeded_db, fmt, tmp_path / f"all.{fmt}")
    from_file = load_ref(seeded_db, str(path))
    from_db = load_ref(seeded_db, "main")
    assert len(from_file) == len(load_ref(seeded_db, "main")) + len(load_ref(seeded_db, "feature"))
    v = compare(from_db, from_file[from_file["label"] == "main"])
    assert len(v.rows) == 9 and not v.mismatches
    assert all(r.ratio == pytest.approx(1.0) for r in v.rows)


# --- stored text that looks like rich markup ---------------------------------------------------


def test_compare_prints_a_bracketed_label_ref_literally(tmp_path: Path) -> None:
    """A label ``[/bold] x`` used as a REF is printed as written (it used to crash rich), in the
    table and in Markdown, with bracketed configuration names and a bracketed error beside it."""
    from click.testing import CliRunner

    from greenbench.cli import main

    label, flat = "[/bold] x", list(np.linspace(1.0, 1.02, 7))
    name = "transformer/tiny [red]seq=128[/red]"
    path = make_db(
        tmp_path / "b.duckdb",
        [
            {"run_id": "aaaa00000001", "label": "main", "config_name": name, "values": flat},
            {"run_id": "bbbb00000002", "label": label, "config_name": name, "values": flat},
            {"run_id": "cccc00000003", "label": label, "config_key": "k2", "values": flat,
             "config_name": "mamba [/i] only here"},
            {"run_id": "dddd00000004", "label": label, "values": [], "status": "failed",
             "error": "failed: [red]x[/red] and [1, 2]"},
        ],
    )  # fmt: skip
    for baseline, candidate in (("main", label), (label, "main")):
        result = CliRunner().invoke(
            main, ["compare", "--baseline", baseline, "--candidate", candidate, "--db", str(path)]
        )
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.split())
        assert f"greenbench compare: {baseline} → {candidate}" in text
        assert name in text and "mamba [/i] only here [estimate]" in text
    md = CliRunner().invoke(
        main,
        ["compare", "--baseline", "main", "--candidate", label, "--format", "markdown",
         "--db", str(path)],
    )  # fmt: skip
    assert md.exit_code == 0, md.output
    assert f"candidate `{label}`" in md.output and "`mamba [/i] only here`" in md.output


def test_markdown_code_spans_survive_backticks() -> None:
    v = compare(frame([1.0] * 7), frame([1.0] * 7))
    v = dataclasses.replace(v, baseline_ref="a`b", candidate_ref="`c")
    md = render_markdown(v)
    assert "baseline ``a`b`` → candidate `` `c ``" in md
