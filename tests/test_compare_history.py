"""`greenbench compare --history` by commit, branch, label and day (greenbench.reporting.axes),
through the CLI over a database whose runs span two branches, three labels, and runs started
outside any checkout (no sha, no branch); and the rule line when nothing was corrected.

The runs are written through the store as the launcher begins and closes them, their repeats'
J/token (with tokens/s) inserted beside.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.compare import compare_history, load_ref, render_markdown
from greenbench.compare.render import rule_line
from greenbench.store import Store, export

DAY0 = datetime(2026, 2, 1, 3)  # nightly runs start at 03:00


def _values(rng: np.random.Generator, level: float) -> list[float]:
    return list(rng.lognormal(np.log(level), 0.02, 3))


RUN = {
    "suite": "smoke", "workload": "transformer-vs-mamba", "config_key": "k1",
    "config_name": "transformer/tiny seq=128 single×1", "config": {"workload": "w"},
    "model_family": "transformer", "model_size": "tiny", "strategy": "single", "layout": "dp1",
    "device": "cpu", "device_type": "cpu:test", "nproc": 1, "nnodes": 1, "precision": "fp32",
    "seq_len": 128, "lengths": "fixed", "energy_source": "estimate", "energy_measured": False,
}  # fmt: skip


def _store(path: Path, runs: list[dict[str, Any]]) -> Path:
    """Each run begun and closed ok through the store, its ``values`` (J/token per repeat)
    stored as its repeats."""
    store = Store(path)
    con = duckdb.connect(str(path))
    try:
        for spec in runs:
            values = spec.pop("values")
            store.begin_run(RUN | spec)
            for repeat, jpt in enumerate(values):
                con.execute(
                    "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, "
                    "energy_source, energy_measured, joules_per_token, energy_j) "
                    "VALUES (?, ?, 1000, 1.0, ?, 'estimate', false, ?, ?)",
                    [spec["run_id"], repeat, 1000.0 / jpt, jpt, jpt * 1000],
                )
    finally:
        con.close()
    for spec in runs:
        store.mark_run(spec["run_id"], "ok")
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Nightly runs of one configuration: 8 commits on main (J/token ≈ 1.0) and 4 on
    feature/x (≈ 1.3); a pull request's run on feature/x (1.31, label pr); 3 runs of main's
    commits under another label (experiment); 6 runs outside a checkout (label offline, no
    sha, no branch) on 4 days, then a 7th the day after."""
    rng = np.random.default_rng(33)
    runs: list[dict[str, Any]] = []

    def add(run_id: str, branch: str | None, **spec: Any) -> None:
        runs.append({"run_id": run_id, "git_branch": branch, **spec})

    for i in range(8):
        add(f"main{i:08d}", "main", label="nightly", git_sha=f"{i:02d}aa" * 4,
            started_at=DAY0 + timedelta(days=i), values=_values(rng, 1.0))  # fmt: skip
    for i in range(4):
        add(f"feat{i:08d}", "feature/x", label="nightly", git_sha=f"{i:02d}ff" * 4,
            started_at=DAY0 + timedelta(days=i, hours=1), values=_values(rng, 1.3))  # fmt: skip
    add("prrun0000001", "feature/x", label="pr", git_sha="abcdef01" * 2,
        started_at=DAY0 + timedelta(days=9), values=[1.31, 1.30, 1.32])  # fmt: skip
    for i in range(3):
        add(f"expe{i:08d}", "main", label="experiment", git_sha=f"{i:02d}aa" * 4,
            started_at=DAY0 + timedelta(days=i, hours=2), values=_values(rng, 0.8))  # fmt: skip
    for i, day in enumerate((20, 20, 21, 22, 22, 23, 24)):
        add(f"offl{i:08d}", None, label="offline",
            started_at=DAY0 + timedelta(days=day, hours=i), values=_values(rng, 1.0))  # fmt: skip
    return _store(tmp_path_factory.mktemp("history") / "h.duckdb", runs)


def compare(db: Path, *args: str) -> tuple[int, dict[str, Any] | str, str]:
    """Exit code, the JSON verdict (or the text), and stderr of one `greenbench compare`."""
    result = CliRunner().invoke(main, ["compare", "--db", str(db), *args])
    try:
        out: dict[str, Any] | str = json.loads(result.stdout)
    except ValueError:
        out = result.stdout
    return result.exit_code, out, result.stderr


def test_history_of_one_branch_judges_the_pull_request_against_it(db: Path) -> None:
    base = ["--history", "--baseline", "nightly", "--candidate", "pr", "--format", "json"]
    code, main_side, _ = compare(db, *base, "--branch", "main")
    (row,) = main_side["rows"]
    assert (code, row["status"], row["n_baseline"]) == (3, "regression", 8)  # 8 commits of main
    assert main_side["history_by"] == "commit"
    assert row["baseline_median"] == pytest.approx(1.0, abs=0.03)
    code, own_branch, _ = compare(db, *base, "--branch", "feature/x")
    (row,) = own_branch["rows"]
    assert (code, row["status"], row["n_baseline"]) == (0, "unchanged", 4)  # feature/x: ≈ 1.3


def test_history_by_branch_has_one_result_per_branch(db: Path) -> None:
    code, text, _ = compare(
        db, "--history", "--baseline", "nightly", "--candidate", "pr", "--by", "branch",
        "--format", "markdown",
    )  # fmt: skip
    assert code == 0
    assert "| 2 branches/3 |" in text  # main and feature/x, one result each; 3 repeats
    assert "need ≥ 3 history results (3 branches), have 2" in text
    assert "(history mode, by branch)" in text and "one history result per branch" in text


def test_history_by_date_is_the_default_without_shas(db: Path) -> None:
    """Runs outside a checkout are not one "unknown" commit: one history result per day."""
    code, verdict, _ = compare(
        db, "--history", "--baseline", "offline", "--candidate", "offline", "--format", "json"
    )
    (row,) = verdict["rows"]
    assert verdict["history_by"] == "date" and row["n_baseline"] == 4  # 6 runs on 4 days
    assert code == 0 and row["n_candidate"] == 3  # the 7th run, the newest: the new result
    code, text, _ = compare(
        db, "--history", "--baseline", "offline", "--candidate", "offline", "--by", "commit",
        "--strict", "--format", "markdown",
    )  # fmt: skip
    assert code == 4 and "6 history runs without a git sha left out" in text
    assert "| 0 commits/3 |" in text
    assert "Holm over" not in text  # nothing had a p-value to correct


def test_a_history_spanning_labels_is_refused_unless_one_is_chosen(
    db: Path, tmp_path: Path
) -> None:
    (everything,) = export(db, "parquet", tmp_path / "all.parquet")
    args = ["--history", "--baseline", str(everything), "--candidate", "prrun0000001"]
    code, _, err = compare(db, *args)
    assert code == 2 and err.count("\n") == 1
    assert "spans 3 labels ('experiment', 'nightly', 'offline')" in err and "--label" in err
    code, verdict, _ = compare(db, *args, "--label", "nightly", "--format", "json")
    # every nightly commit, of both branches: feature/x's ≈ 1.3 widen the interval enough to
    # hide what --branch main shows (a regression); hence history per branch
    assert code == 0 and verdict["rows"][0]["n_baseline"] == 12
    code, verdict, _ = compare(db, *args, "--by", "label", "--format", "json")
    (row,) = verdict["rows"]
    assert verdict["history_by"] == "label" and row["n_baseline"] == 3  # one result per label
    # the same sha under two labels is two series: --label experiment keeps only its runs
    code, verdict, _ = compare(db, *args, "--label", "experiment", "--format", "json")
    assert verdict["rows"][0]["n_baseline"] == 3


def test_history_options_refuse_bad_use_in_one_line(db: Path) -> None:
    for args, message in (
        (["--baseline", "nightly", "--candidate", "pr", "--by", "date"], "go with --history"),
        (["--baseline", "nightly", "--candidate", "pr", "--branch", "main"], "go with --history"),
        (["--history", "--baseline", "nightly", "--candidate", "pr", "--branch", "nope"],
         "holds no run on branch 'nope'"),
        (["--history", "--baseline", "nightly", "--candidate", "pr", "--by", "week"],
         "'week' is not one of"),
    ):  # fmt: skip
        code, _, err = compare(db, *args)
        assert code == 2 and message in err, (args, err)
        assert err.strip().count("\n") <= 1 or "Usage:" in err


def test_the_rule_line_never_says_holm_over_nothing(db: Path) -> None:
    args = ["--history", "--baseline", "nightly", "--candidate", "pr", "--branch", "main"]
    code, text, _ = compare(db, *args)
    assert code == 3 and "(Holm over 1)" in " ".join(str(text).split())  # one p-value
    # a candidate whose configuration has no history: nothing compared at all
    history = load_ref(db, "nightly")
    other = load_ref(db, "pr").assign(config_key="elsewhere", seed_group="elsewhere")
    verdict = compare_history(history, other)
    assert verdict.rows == () and verdict.mismatches
    line = rule_line(verdict)
    assert "Holm over" not in line and "no comparisons" in line
    assert "Holm over 0" not in render_markdown(verdict)
