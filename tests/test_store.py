"""Store: round trips, refusals that leave files untouched, migrations, locking, export."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

from greenbench.energy.base import EnergyWindow, PowerSample
from greenbench.errors import StoreError
from greenbench.results import HarnessCost, RankResult, RepeatResult, RunOutcome
from greenbench.settings import identity_of, spec_identity
from greenbench.store import (
    Store,
    check_integrity,
    config_key,
    export,
    get_run,
    list_runs,
    merge_pending,
    new_run_id,
    power_samples,
    read_frame,
    unfinished_runs,
    write_shard,
)
from greenbench.store import connection as connection_mod
from greenbench.store import writer as store_mod


def run_row(run_id: str, **extra: Any) -> dict[str, Any]:
    row = {
        "run_id": run_id,
        "suite": "smoke",
        "workload": "transformer-vs-mamba",
        "config_name": "transformer/tiny seq=256 fixed single×1",
        "config": {"workload": "transformer-vs-mamba", "settings": {"data.seq_len": 256}},
        "model_family": "transformer",
        "model_size": "tiny",
        "strategy": "ddp",
        "layout": "dp2",
        "device": "cpu",
        "device_type": "cpu:Test CPU",
        "nproc": 2,
        "nnodes": 1,
        "precision": "fp32",
        "seq_len": 256,
        "lengths": "fixed",
        "energy_source": "rapl",
        "energy_measured": True,
        "region": "FRA",
        "carbon_intensity_g_per_kwh": 56.0,
        "label": "main",
        "git_sha": "abc123",
        "host": "node-a",
        "hardware": {"cpu_model": "Test CPU"},
        "versions": {"torch": "2.13.0+cpu"},
    }
    return row | extra


def make_outcome() -> RunOutcome:
    def window(energy_j: float | None, samples: tuple[PowerSample, ...]) -> EnergyWindow:
        return EnergyWindow("rapl", True, 2.0, energy_j, None, energy_j, None, samples, "ok")

    ranks = [
        RankResult(
            rank=rank,
            local_rank=rank,
            host="node-a",
            repeat=repeat,
            tokens=1000 + rank,
            seconds=2.0 + rank / 10,
            compute_s=1.5,
            comm_s=0.25,
            wait_s=0.25,
            step_times_s=(0.5, 0.75, 0.5),
            peak_mem_bytes=3_000_000_000 + rank,
            flops=1.5e12,
            loss=2.5 + repeat,
            n_microbatches=4,
            energy=window(
                100.0 + repeat, (PowerSample(0.0, 50.0, "cpu0"), PowerSample(1.0, 51.5, "cpu0"))
            )
            if rank == 0
            else None,
            param_bytes=4_000_000,
            grad_bytes=4_000_000,
            optim_bytes=8_000_016,
            activation_bytes=1_000_000 + rank,
        )
        for repeat in range(2)
        for rank in range(2)
    ]
    repeats = [
        RepeatResult(
            repeat=k,
            tokens=2001,
            seconds=2.1,
            tokens_per_s=952.8,
            energy_source="rapl",
            energy_measured=True,
            energy_j=100.0 + k,
            energy_net_j=80.0,
            energy_gpu_j=None,
            energy_cpu_j=100.0,
            energy_dram_j=None,
            idle_power_w=9.5,
            joules_per_token=0.05,
            net_joules_per_token=0.04,
            flops=3e12,
            mfu=None,
            peak_mem_bytes=3_000_000_001,
            step_time_p50_s=0.5,
            step_time_p95_s=0.75,
            wait_fraction=0.12,
            wait_energy_j=12.0,
            co2_g=0.0016,
            loss=3.0,
            energy_note="a note",
            step_times_s=(0.5, 0.75, 0.5),
            state_bytes=17_000_017,
        )
        for k in range(2)
    ]
    return RunOutcome(
        status="ok",
        repeats=repeats,
        ranks=ranks,
        peak_flops=1.1e11,
        peak_flops_source="cpu-gemm-calibration",
        hardware={"cpu_model": "Test CPU", "logical_cores": 2},
    )


def snapshot(path: Path) -> tuple[bytes, int, list[str]]:
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())


# --------------------------------------------------------------------------- round trip


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    outcome = make_outcome()
    with Store(db) as store:
        store.begin_run(run_row("0123456789ab"))
        assert get_run(db, "0123456789ab")["status"] == "running"
        store.finish_run("0123456789ab", outcome)

    run = get_run(db, "0123")  # a unique prefix works
    expected = run_row("0123456789ab")
    for key, value in expected.items():
        if key != "hardware":
            assert run[key] == value, key
    assert run["config_key"] == config_key(expected["config"])
    assert run["hardware"] == outcome.hardware  # finish_run's hardware replaces begin_run's
    assert run["status"] == "ok" and run["error"] is None and run["failed_rank"] is None
    assert run["peak_flops"] == 1.1e11 and run["peak_flops_source"] == "cpu-gemm-calibration"
    assert run["started_at"] <= run["finished_at"]

    repeats = []
    for row in run["results"]:
        fields = {k: v for k, v in row.items() if k != "run_id"}
        repeats.append(RepeatResult(**fields | {"step_times_s": tuple(row["step_times_s"])}))
    assert repeats == outcome.repeats

    samples = power_samples(db, "0123456789ab")
    rebuilt = []
    for row in run["rank_results"]:
        energy = None
        if row["energy_source"] is not None:
            mine = samples[(samples["repeat"] == row["repeat"]) & (samples["rank"] == row["rank"])]
            energy = EnergyWindow(
                source=row["energy_source"],
                measured=row["energy_measured"],
                seconds=row["energy_seconds"],
                energy_j=row["energy_j"],
                energy_gpu_j=row["energy_gpu_j"],
                energy_cpu_j=row["energy_cpu_j"],
                energy_dram_j=row["energy_dram_j"],
                samples=tuple(
                    PowerSample(s.t_s, s.power_w, s.component) for s in mine.itertuples()
                ),
                note=row["energy_note"],
            )
        fields = {k: v for k, v in row.items() if k in RankResult.__slots__}
        fields |= {"step_times_s": tuple(row["step_times_s"]), "energy": energy}
        rebuilt.append(RankResult(**fields))
    assert rebuilt == outcome.ranks
    assert len(samples) == 4

    runs = list_runs(db)
    assert list(runs["run_id"]) == ["0123456789ab"]
    assert runs.loc[0, "n_repeats"] == 2 and runs.loc[0, "joules_per_token_median"] == 0.05


def test_model_state_is_stored_per_rank_and_the_most_per_repeat(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    with Store(db) as store:
        store.begin_run(run_row("0123456789ab"))
        store.finish_run("0123456789ab", make_outcome())
    ranks = read_frame(
        db,
        "SELECT rank, param_bytes, grad_bytes, optim_bytes, activation_bytes, state_bytes "
        "FROM rank_results WHERE repeat = 0 ORDER BY rank",
    )
    assert list(ranks.state_bytes) == [17_000_016, 17_000_017]
    assert list(ranks.activation_bytes) == [1_000_000, 1_000_001]
    repeats = read_frame(db, "SELECT state_bytes FROM results ORDER BY repeat")
    assert list(repeats.state_bytes) == [17_000_017, 17_000_017]


def test_runs_stored_before_state_memory_keep_it_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 7 adds the model-state columns; runs stored before it have them NULL (never 0)
    and a new run stores them beside the old ones."""
    db = tmp_path / "v6.duckdb"
    old = make_outcome()
    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "SCHEMA_VERSION", 6)  # this file stops at version 6
        store = Store(db)
        store.begin_run(run_row("aaaaaaaaaaaa"))
        con = duckdb.connect(str(db))
        con.execute(
            "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, energy_source, "
            "energy_measured, peak_mem_bytes) VALUES ('aaaaaaaaaaaa', 0, 1, 1.0, 1.0, 'rapl', "
            "true, 5)"
        )
        con.close()
        assert "state_bytes" not in set(read_frame(db, "DESCRIBE results")["column_name"])
    Store(db)  # migrates
    assert read_frame(db, "SELECT state_bytes FROM results").state_bytes.isna().all()
    store = Store(db)
    store.begin_run(run_row("bbbbbbbbbbbb"))
    store.finish_run("bbbbbbbbbbbb", old)
    stored = get_run(db, "bbbbbbbbbbbb")
    assert [r["state_bytes"] for r in stored["results"]] == [17_000_017, 17_000_017]
    assert get_run(db, "aaaaaaaaaaaa")["results"][0]["state_bytes"] is None


def test_runs_stored_before_simulated_runs_read_as_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 8 adds ``runs.simulated``: runs stored before it ran on devices (false); a
    simulated run stores true beside them; a database from before it opens."""
    db = tmp_path / "v7.duckdb"
    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "SCHEMA_VERSION", 7)  # this file stops at version 7
        store = Store(db)
        store.begin_run(run_row("aaaaaaaaaaaa"))
        store.mark_run("aaaaaaaaaaaa", "ok")  # its results' later columns are not there yet
        assert "simulated" not in set(read_frame(db, "DESCRIBE runs")["column_name"])
    store = Store(db)  # migrates
    assert get_run(db, "aaaaaaaaaaaa")["simulated"] is False
    store.begin_run(run_row("bbbbbbbbbbbb", simulated=True, energy_source="model"))
    store.begin_run(run_row("cccccccccccc"))  # a row that does not say: NULL, read as false
    flags = read_frame(db, "SELECT run_id, simulated FROM runs ORDER BY run_id")
    assert flags.simulated.tolist()[:2] == [False, True] and pd.isna(flags.simulated.iloc[2])
    versions = read_frame(db, "SELECT max(version) AS v FROM schema_version")
    assert int(versions.v.iloc[0]) == store_mod.SCHEMA_VERSION >= 8


def test_runs_stored_before_power_limits_keep_them_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 9 adds a run's power limit and, per repeat, the GPUs' mean and peak power and the
    node meter beside the devices' energy: runs stored before it have them NULL (never 0), a
    database from before it opens, and a new run stores them beside the old ones."""
    db = tmp_path / "v8.duckdb"
    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "SCHEMA_VERSION", 8)  # this file stops at version 8
        store = Store(db)
        store.begin_run(run_row("aaaaaaaaaaaa"))
        con = duckdb.connect(str(db))
        con.execute(
            "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, energy_source, "
            "energy_measured, energy_j, peak_mem_bytes) VALUES ('aaaaaaaaaaaa', 0, 1, 1.0, 1.0, "
            "'nvml', true, 5.0, 5)"
        )
        con.close()
        store.mark_run("aaaaaaaaaaaa", "ok")
        assert "power_limit_w" not in set(read_frame(db, "DESCRIBE runs")["column_name"])
    store = Store(db)  # migrates
    old = get_run(db, "aaaaaaaaaaaa")
    assert old["power_limit_w"] is None and old["power_limit_via"] is None
    assert old["results"][0]["energy_node_j"] is None
    assert old["results"][0]["gpu_power_peak_w"] is None
    outcome = make_outcome()
    outcome.repeats = [
        replace(r, gpu_power_avg_w=480.0, gpu_power_peak_w=489.5, energy_node_j=9000.0,
                energy_node_source="ipmi", energy_node_note="8 reading(s)")
        for r in outcome.repeats
    ]  # fmt: skip
    store.begin_run(
        run_row("bbbbbbbbbbbb", power_limit_w=490.0, power_limit_default_w=700.0,
                power_limit_via="nvml", power_limit_note=None)
    )  # fmt: skip
    store.finish_run("bbbbbbbbbbbb", outcome)
    new = get_run(db, "bbbbbbbbbbbb")
    assert (new["power_limit_w"], new["power_limit_default_w"]) == (490.0, 700.0)
    assert new["results"][0]["energy_node_j"] == 9000.0
    assert new["results"][0]["energy_node_source"] == "ipmi"
    assert new["results"][0]["gpu_power_peak_w"] == 489.5
    versions = read_frame(db, "SELECT max(version) AS v FROM schema_version")
    assert int(versions.v.iloc[0]) == store_mod.SCHEMA_VERSION >= 9


MIGRATIONS_DIR = Path(store_mod.__file__).with_name("migrations")
#: what the launcher stored before contention was counted: pids and 80 characters of commands
OLD_WARNING = (
    "contended: other greenbench processes ran meanwhile (4242: python -m greenbench run "
    "--suite /home/someone/secret-project/bench.toml --label confidential; 4243: python -m "
    "greenbench.rank.worker); other processes kept 1.37 of 2 cores busy meanwhile (figures "
    "may be skewed)"
)


def version_of(migration: str) -> int:
    """The schema version a migration (named by part of its file name) takes a database to."""
    return next(int(p.name[:4]) for p in MIGRATIONS_DIR.iterdir() if migration in p.name)


def test_runs_stored_before_trust_columns_lose_pids_and_negative_net_energy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trust migration: a stored contention warning keeps counts, never pids or command
    lines, and its figures move to columns; a negative net energy (an idle baseline sampled
    under load) becomes unknown with why; new runs store all of it beside the old ones."""
    trust = version_of("trust")
    db = tmp_path / "old.duckdb"
    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "SCHEMA_VERSION", trust - 1)  # this file stops before it
        store = Store(db)
        store.begin_run(run_row("aaaaaaaaaaaa"))
        con = duckdb.connect(str(db))  # as that version's launcher wrote them
        for repeat in (0, 1):
            con.execute(
                "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, "
                "energy_source, energy_measured, energy_j, energy_net_j, idle_power_w, "
                "joules_per_token, net_joules_per_token, peak_mem_bytes) VALUES ('aaaaaaaaaaaa', "
                "?, 1000, 2.0, 500.0, 'estimate', false, 40.0, -0.8, 20.4, 0.04, -0.0008, 5)",
                [repeat],
            )
        con.execute(
            "UPDATE runs SET contended = true, warnings = ?::JSON WHERE run_id = 'aaaaaaaaaaaa'",
            [json.dumps([OLD_WARNING])],
        )
        con.close()
        store.mark_run("aaaaaaaaaaaa", "ok")
        assert "idle_note" not in set(read_frame(db, "DESCRIBE results")["column_name"])
    Store(db)  # migrates
    run = get_run(db, "aaaaaaaaaaaa")
    (warning,) = run["warnings"]
    assert warning.startswith("contended: ")
    for private in ("4242", "4243", "secret-project", "confidential", "python -m"):
        assert private not in warning
    assert "2 other greenbench processes ran meanwhile" in warning
    assert "other processes kept 1.37 of 2 cores busy meanwhile" in warning
    assert (run["others_busy_cores"], run["other_greenbench"]) == (1.37, 2)
    for r in run["results"]:
        assert r["energy_net_j"] is None and r["net_joules_per_token"] is None
        assert r["idle_note"].startswith("idle baseline unreliable")

    new = make_outcome()
    new.repeats = [replace(new.repeats[0], idle_note="idle baseline unreliable: busy"),
                   new.repeats[1]]  # fmt: skip
    store = Store(db)
    store.begin_run(run_row("bbbbbbbbbbbb"))
    store.finish_run(
        "bbbbbbbbbbbb", replace(new, contended=True, others_busy_cores=0.4, other_greenbench=1)
    )
    stored = get_run(db, "bbbbbbbbbbbb")
    assert (stored["others_busy_cores"], stored["other_greenbench"]) == (0.4, 1)
    assert [r["idle_note"] for r in stored["results"]] == ["idle baseline unreliable: busy", ""]
    versions = read_frame(db, "SELECT max(version) AS v FROM schema_version")
    assert int(versions.v.iloc[0]) == store_mod.SCHEMA_VERSION >= trust


def test_runs_stored_before_useful_tokens_open_with_them_known_only_where_nothing_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The useful-tokens migration: a database from before it opens; a run that skipped nothing
    (another strategy, SkipPipe's full schedules) gets share 1 and its plain figures as useful
    ones; a SkipPipe run that skipped stays unknown; a new run stores its own beside them."""
    useful = version_of("useful_tokens")
    db = tmp_path / "old.duckdb"
    skippipe = {"strategy": "skippipe", "skippipe.skip": 0.5}
    runs = {
        "aaaaaaaaaaaa": {},
        "bbbbbbbbbbbb": {"strategy": "skippipe", "config": {
            "settings": skippipe | {"skippipe.schedule": "full"}}},
        "cccccccccccc": {"strategy": "skippipe", "config": {
            "settings": skippipe | {"skippipe.schedule": "skippipe"}}},
        "dddddddddddd": {"strategy": "skippipe", "config": {"settings": skippipe}},
    }  # fmt: skip
    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "SCHEMA_VERSION", useful - 1)  # this file stops before it
        store = Store(db)
        con = duckdb.connect(str(db))
        for run_id, extra in runs.items():
            store.begin_run(run_row(run_id, **extra))
            con.execute(
                "INSERT INTO results (run_id, repeat, tokens, seconds, tokens_per_s, "
                "energy_source, energy_measured, energy_j, joules_per_token, flops, "
                "peak_mem_bytes) VALUES (?, 0, 1000, 2.0, 500.0, 'rapl', true, 40.0, 0.04, "
                "3e9, 5)",
                [run_id],
            )
        con.close()
        for run_id in runs:
            store.mark_run(run_id, "ok")
        assert "visited_share" not in set(read_frame(db, "DESCRIBE results")["column_name"])
    store = Store(db)  # migrates
    stored = {run_id: get_run(db, run_id)["results"][0] for run_id in runs}
    for run_id in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        r = stored[run_id]
        assert (r["visited_share"], r["useful_tokens"], r["useful_flops"]) == (1.0, 1000.0, 3e9)
        assert (r["useful_tokens_per_s"], r["joules_per_useful_token"]) == (500.0, 0.04)
    for run_id in ("cccccccccccc", "dddddddddddd"):  # skipped: not counted then
        r = stored[run_id]
        assert r["visited_share"] is None and r["useful_tokens"] is None
        assert r["joules_per_useful_token"] is None
    new = make_outcome()
    new.repeats = [
        replace(r, visited_share=0.5, useful_tokens=r.tokens * 0.5, useful_flops=r.flops,
                useful_tokens_per_s=r.tokens * 0.5 / r.seconds,
                joules_per_useful_token=None)
        for r in new.repeats
    ]  # fmt: skip
    store.begin_run(run_row("eeeeeeeeeeee"))
    store.finish_run("eeeeeeeeeeee", new)
    results = get_run(db, "eeeeeeeeeeee")["results"]
    assert [r["visited_share"] for r in results] == [0.5, 0.5]
    assert [r["useful_tokens"] for r in results] == [r.tokens * 0.5 for r in new.repeats]
    versions = read_frame(db, "SELECT max(version) AS v FROM schema_version")
    assert int(versions.v.iloc[0]) == store_mod.SCHEMA_VERSION >= useful


def test_runs_stored_before_git_branches_open_with_the_branch_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The git-branch migration: a database from before it is read (list, export) as it is,
    then opens for writing and migrates; its runs keep an unknown branch, a new run stores its
    own, and `list runs`, `show` and the export carry it."""
    from click.testing import CliRunner

    from greenbench.cli import main

    branch = version_of("git_branch")
    db = tmp_path / "old.duckdb"
    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "SCHEMA_VERSION", branch - 1)  # this file stops before it
        store = Store(db)
        store.begin_run(run_row("aaaaaaaaaaaa"))
        store.finish_run("aaaaaaaaaaaa", make_outcome())
        with pytest.raises(StoreError, match=r"unknown runs column.*git_branch"):
            store.begin_run(run_row("bbbbbbbbbbbb", git_branch="feature/x"))
    assert "git_branch" not in set(read_frame(db, "DESCRIBE runs")["column_name"])
    listed = CliRunner().invoke(main, ["list", "runs", "--db", str(db)])  # readers never migrate
    assert listed.exit_code == 0, listed.output
    assert "branch" in listed.output and "aaaaaaaaaaaa" in listed.output

    store = Store(db)  # migrates
    assert get_run(db, "aaaaaaaaaaaa")["git_branch"] is None
    store.begin_run(run_row("bbbbbbbbbbbb", git_branch="feature/x"))
    store.finish_run("bbbbbbbbbbbb", make_outcome())
    runs = list_runs(db).set_index("run_id")
    assert runs.loc["bbbbbbbbbbbb", "git_branch"] == "feature/x"
    assert pd.isna(runs.loc["aaaaaaaaaaaa", "git_branch"])
    listed = CliRunner().invoke(main, ["list", "runs", "--db", str(db)])
    line = next(x for x in listed.output.splitlines() if "bbbbbbbbbbbb" in x)
    assert "feature/x" in line and "main" in line  # its branch, and its label
    shown = CliRunner().invoke(main, ["show", "bbbbbbbbbbbb", "--db", str(db)])
    assert "git=abc123 branch=feature/x" in " ".join(shown.output.split())
    (path,) = export(db, "csv", tmp_path / "runs.csv")
    exported = pd.read_csv(path).drop_duplicates("run_id").set_index("run_id")
    assert exported.loc["bbbbbbbbbbbb", "git_branch"] == "feature/x"
    assert pd.isna(exported.loc["aaaaaaaaaaaa", "git_branch"])
    versions = read_frame(db, "SELECT max(version) AS v FROM schema_version")
    assert int(versions.v.iloc[0]) == store_mod.SCHEMA_VERSION >= branch


def test_two_migrations_of_one_number_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two files numbered alike would leave one of them never applied: refused at load."""
    from importlib import resources

    folder = tmp_path / "migrations"
    folder.mkdir()
    for name in ("0002_one.sql", "0002_two.sql", "__init__.py"):
        (folder / name).write_text("SELECT 1;")

    class Files:  # `importlib.resources.files`, pointing the store's package at this folder
        def joinpath(self, name: str) -> Path:
            return folder

    monkeypatch.setattr(resources, "files", lambda package: Files())
    with pytest.raises(StoreError, match="two schema migrations numbered 0002"):
        store_mod._load_migrations()


def test_migrations_are_numbered_without_gaps() -> None:
    files = sorted(int(p.name[:4]) for p in MIGRATIONS_DIR.iterdir() if p.name[:4].isdigit())
    assert files == list(range(2, store_mod.SCHEMA_VERSION + 1))


def test_runs_stored_before_harness_cost_open_with_it_unknown_and_new_runs_keep_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness-cost migration: a database from before it opens, its runs' harness columns
    unknown (NULL); a new run stores what greenbench cost it, read back by `get_run` and
    exported; through a result shard merged into the database as well."""
    harness = version_of("harness_cost")
    db = tmp_path / "old.duckdb"
    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "SCHEMA_VERSION", harness - 1)  # this file stops before it
        old = Store(db)
        old.begin_run(run_row("aaaaaaaaaaaa"))
        old.mark_run("aaaaaaaaaaaa", "interrupted", "as that version stored it")
        assert "harness_startup_s" not in set(read_frame(db, "DESCRIBE runs")["column_name"])
    store = Store(db)  # migrates
    columns = list(HarnessCost().row())
    assert all(get_run(db, "aaaaaaaaaaaa")[c] is None for c in columns)
    cost = HarnessCost(startup_s=7.5, ranks_s=4.0, calibration_s=0.0, baseline_s=0.0,
                       baseline_age_s=42.0, teardown_s=0.3)  # fmt: skip
    store.begin_run(run_row("bbbbbbbbbbbb"))
    store.finish_run("bbbbbbbbbbbb", replace(make_outcome(), harness=cost))
    assert {c: get_run(db, "bbbbbbbbbbbb")[c] for c in columns} == cost.row()
    out = tmp_path / "runs.csv"
    export(db, "csv", out)
    exported = pd.read_csv(out).drop_duplicates("run_id").set_index("run_id")
    assert exported.loc["bbbbbbbbbbbb", "idle_baseline_age_s"] == 42.0
    assert pd.isna(exported.loc["aaaaaaaaaaaa", "harness_startup_s"])

    shard = write_shard(db, {**run_row("cccccccccccc"), "status": "running"},
                        outcome=replace(make_outcome(), harness=cost))  # fmt: skip
    assert shard.exists()
    merge_pending(Store(db), timeout_s=5.0)
    assert {c: get_run(db, "cccccccccccc")[c] for c in columns} == cost.row()


def test_writes_do_not_hold_the_file(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    store = Store(db)
    store.begin_run(run_row("aaaaaaaaaaaa"))
    # a writer connection still open in this process would refuse a read-only one
    duckdb.connect(str(db), read_only=True).close()
    assert list(unfinished_runs(db)["run_id"]) == ["aaaaaaaaaaaa"]
    store.mark_run("aaaaaaaaaaaa", "interrupted", "stopped")
    assert unfinished_runs(db).empty
    assert get_run(db, "aaaaaaaaaaaa")["error"] == "stopped"


def test_finish_run_again_replaces_rows(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    store = Store(db)
    store.begin_run(run_row("aaaaaaaaaaaa"))
    store.finish_run("aaaaaaaaaaaa", make_outcome())
    store.finish_run("aaaaaaaaaaaa", RunOutcome(status="failed", error="boom", failed_rank=1))
    run = get_run(db, "aaaaaaaaaaaa")
    assert (run["status"], run["error"], run["failed_rank"]) == ("failed", "boom", 1)
    assert run["results"] == [] and run["rank_results"] == []
    assert run["energy_source"] == "rapl"  # kept from begin_run when no repeat says otherwise
    assert power_samples(db, "aaaaaaaaaaaa").empty


def test_bad_writes_raise_and_write_nothing(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    store = Store(db)
    with pytest.raises(StoreError, match="unknown runs column"):
        store.begin_run(run_row("aaaaaaaaaaaa", colour="red"))
    with pytest.raises(StoreError, match=r"missing required runs column.*workload"):
        store.begin_run({k: v for k, v in run_row("aaaaaaaaaaaa").items() if k != "workload"})
    assert list_runs(db).empty
    store.begin_run(run_row("aaaaaaaaaaaa"))
    with pytest.raises(StoreError, match="already exists"):
        store.begin_run(run_row("aaaaaaaaaaaa"))
    with pytest.raises(StoreError, match="no run 'bbbbbbbbbbbb'"):
        store.finish_run("bbbbbbbbbbbb", make_outcome())
    with pytest.raises(StoreError, match="status must be"):
        store.mark_run("aaaaaaaaaaaa", "done")
    assert len(list_runs(db)) == 1


def test_context_manager_closes_unfinished_runs(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    with pytest.raises(RuntimeError), Store(db) as store:
        store.begin_run(run_row("aaaaaaaaaaaa"))
        raise RuntimeError("worker exploded")
    with pytest.raises(KeyboardInterrupt), Store(db) as store:
        store.begin_run(run_row("bbbbbbbbbbbb"))
        raise KeyboardInterrupt
    a, b = get_run(db, "aaaaaaaaaaaa"), get_run(db, "bbbbbbbbbbbb")
    assert (a["status"], a["error"]) == ("failed", "RuntimeError: worker exploded")
    assert b["status"] == "interrupted"
    assert unfinished_runs(db).empty


def test_get_run_unknown_and_ambiguous(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    store = Store(db)
    store.begin_run(run_row("abc111111111"))
    store.begin_run(run_row("abc222222222"))
    with pytest.raises(StoreError, match="ambiguous"):
        get_run(db, "abc")
    with pytest.raises(StoreError, match="no run 'fff'"):
        get_run(db, "fff")
    assert get_run(db, "abc2")["run_id"] == "abc222222222"


def test_ids_and_config_key() -> None:
    ids = {new_run_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 12 and int(i, 16) >= 0 for i in ids)
    base = {"data.seq_len": 256, "seed": 0, "repeats": 3}
    key = config_key(identity_of(base, "w"))
    assert len(key) == 16
    # repeats and test instrumentation are not part of a configuration (nor are a run's label
    # and suite, which are not settings)
    same = {"repeats": 5, "seed": 0, "debug.slowdown_s": 1.0, "data.seq_len": 256}
    assert config_key(identity_of(same, "w")) == key
    assert config_key(identity_of({"data.seq_len": 512, "seed": 0}, "w")) != key
    assert config_key(identity_of({"data.seq_len": 256, "seed": 1}, "w")) != key
    assert config_key(identity_of(base, "v")) != key


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("content", [b"", b"not a database at all\n" * 100])
def test_refuses_non_duckdb_file_untouched(tmp_path: Path, content: bytes) -> None:
    db = tmp_path / "results.duckdb"
    db.write_bytes(content)
    before = snapshot(db)
    with pytest.raises(StoreError, match="not a DuckDB database"):
        Store(db)
    with pytest.raises(StoreError, match="not a DuckDB database"):
        list_runs(db)
    assert snapshot(db) == before


def test_refuses_foreign_duckdb_untouched(tmp_path: Path) -> None:
    db = tmp_path / "other.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE invoices (id INTEGER)")
    con.close()
    before = snapshot(db)
    with pytest.raises(StoreError, match=r"not a greenbench results database.*invoices"):
        Store(db)
    with pytest.raises(StoreError, match="not a greenbench results database"):
        get_run(db, "abc")
    assert snapshot(db) == before


def test_refuses_newer_schema_untouched(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    Store(db)
    con = duckdb.connect(str(db))
    con.execute("INSERT INTO schema_version VALUES (99, now())")
    con.close()
    before = snapshot(db)
    with pytest.raises(StoreError, match="schema version 99, newer than"):
        Store(db)
    assert snapshot(db) == before


def test_missing_directory_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "nope" / "g.duckdb")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # root ignores permission bits, so fake the answer at the os boundary
    real_access = store_mod.os.access

    def access(path: str | Path, mode: int) -> bool:
        return False if Path(path) == tmp_path else real_access(path, mode)

    monkeypatch.setattr(store_mod.os, "access", access)
    with pytest.raises(StoreError, match="not writable"):
        Store(tmp_path / "g.duckdb")
    assert list(tmp_path.iterdir()) == []


def test_missing_database_for_readers(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no results database"):
        list_runs(tmp_path / "absent.duckdb")


# --------------------------------------------------------------------------- migrations


def test_migration_applies_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "g.duckdb"
    Store(db).begin_run(run_row("aaaaaaaaaaaa"))
    current = store_mod.SCHEMA_VERSION  # the versions this code already has
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", current + 1)
    monkeypatch.setattr(
        store_mod,
        "MIGRATIONS",
        {**store_mod.MIGRATIONS, current: "ALTER TABLE runs ADD COLUMN power_cap_w DOUBLE"},
    )
    store = Store(db)
    versions = read_frame(db, "SELECT version FROM schema_version ORDER BY version")
    assert list(versions["version"]) == list(range(1, current + 2))
    store.begin_run(run_row("bbbbbbbbbbbb", power_cap_w=250.0))
    assert get_run(db, "bbbbbbbbbbbb")["power_cap_w"] == 250.0
    assert get_run(db, "aaaaaaaaaaaa")["power_cap_w"] is None  # old rows kept
    Store(db)  # already current: nothing applied twice
    assert len(read_frame(db, "SELECT * FROM schema_version")) == current + 1

    fresh = tmp_path / "fresh.duckdb"
    Store(fresh)  # a new file gets the v1 schema plus every migration
    assert "power_cap_w" in set(read_frame(fresh, "DESCRIBE runs")["column_name"])
    fresh_versions = read_frame(fresh, "SELECT version FROM schema_version ORDER BY version")
    assert list(fresh_versions["version"]) == list(range(1, current + 2))


def test_a_version_1_database_migrates_and_keeps_its_runs(tmp_path: Path) -> None:
    """A file as greenbench wrote it before migration 2 (schema v1 only) opens, gains the
    diagnostics columns, keeps its runs, and takes a failed run's diagnostics."""
    from importlib import resources

    db = tmp_path / "v1.duckdb"
    con = duckdb.connect(str(db))
    con.execute(resources.files("greenbench").joinpath("store_schema.sql").read_text())
    con.execute("INSERT INTO schema_version VALUES (1, now())")
    row = run_row("aaaaaaaaaaaa", status="ok", config_key="0" * 16, started_at="2026-11-01")
    for col in ("config", "hardware", "versions"):
        row[col] = json.dumps(row[col])
    cols = sorted(row)
    con.execute(
        f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
        [row[c] for c in cols],
    )
    con.close()

    store = Store(db)
    assert {"warnings", "error_tail", "log_path"} <= set(
        read_frame(db, "DESCRIBE runs")["column_name"]
    )
    old = get_run(db, "aaaaaaaaaaaa")
    assert old["status"] == "ok" and old["warnings"] is None
    store.begin_run(run_row("bbbbbbbbbbbb"))
    store.finish_run(
        "bbbbbbbbbbbb",
        RunOutcome(
            status="failed",
            error="rank 1: killed by SIGABRT: terminate called without an active exception",
            failed_rank=1,
            error_tail="line a\nterminate called without an active exception",
            log_path=str(tmp_path / "logs" / "bbbbbbbbbbbb"),
        ),
    )
    failed = get_run(db, "bbbbbbbbbbbb")
    assert failed["failed_rank"] == 1
    assert failed["error_tail"].endswith("terminate called without an active exception")
    assert failed["log_path"].endswith("bbbbbbbbbbbb")
    store.begin_run(run_row("cccccccccccc"))
    store.finish_run("cccccccccccc", RunOutcome(status="ok", warnings=["rank 1: late abort"]))
    assert get_run(db, "cccccccccccc")["warnings"] == ["rank 1: late abort"]


def test_failed_migration_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "g.duckdb"
    Store(db)
    current = store_mod.SCHEMA_VERSION
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", current + 2)
    monkeypatch.setattr(
        store_mod,
        "MIGRATIONS",
        {
            **store_mod.MIGRATIONS,
            current: "ALTER TABLE runs ADD COLUMN x DOUBLE",
            current + 1: "ALTER TABLE no_such_table ADD COLUMN y INT",
        },
    )
    with pytest.raises(StoreError, match=rf"migrating .* from schema version {current} failed"):
        Store(db)
    versions = read_frame(db, "SELECT version FROM schema_version ORDER BY version")
    assert list(versions["version"]) == list(range(1, current + 1))
    assert "x" not in set(read_frame(db, "DESCRIBE runs")["column_name"])


# --------------------------------------------------------------------------- locking

HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
sys.stdin.readline()
con.close()
print("released", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def lock_holder(tmp_path: Path):
    db = tmp_path / "g.duckdb"
    Store(db)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    yield db, proc
    proc.stdin.close()
    proc.wait(timeout=30)


def test_locked_file_times_out_clearly(lock_holder: tuple[Path, subprocess.Popen]) -> None:
    db, _ = lock_holder
    with pytest.raises(StoreError, match=r"locked by another process \(is a `greenbench run`"):
        Store(db, lock_timeout_s=0.2)
    with pytest.raises(StoreError, match="locked by another process"):
        read_frame(db, "SELECT 1", retries=2, backoff_s=0.01)


def test_locked_file_retries_until_released(
    lock_holder: tuple[Path, subprocess.Popen], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, proc = lock_holder
    real_sleep = connection_mod.time.sleep
    sleeps = []

    def sleep_and_release(seconds: float) -> None:
        if not sleeps:  # the first retry: let the other process go, wait until it has
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "released"
        sleeps.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(connection_mod.time, "sleep", sleep_and_release)
    Store(db, lock_timeout_s=30).begin_run(run_row("aaaaaaaaaaaa"))
    assert sleeps  # it did wait for the lock
    assert get_run(db, "aaaaaaaaaaaa")["status"] == "running"


# --------------------------------------------------------------------------- queries, export


def test_seeded_db_contents(seeded_db: Path) -> None:
    runs = list_runs(seeded_db, limit=None)
    assert len(runs) == 12
    assert list(runs["status"]).count("failed") == 1
    assert set(runs["label"]) == {"main", "feature"} and runs["git_sha"].nunique() == 2
    measured = list_runs(seeded_db, energy_measured=True)
    assert list(measured["energy_source"]) == ["rapl"]
    assert set(list_runs(seeded_db, nproc=2)["strategy"]) == {"ddp", "fsdp"}
    ok = runs[runs["status"] == "ok"]
    assert (ok["n_repeats"] == 3).all()
    transformer = list_runs(
        seeded_db, model_family="transformer", seq_len=512, workload="transformer-vs-mamba"
    )
    assert transformer["config_key"].nunique() == 1 and len(transformer) == 2
    by_label = transformer.set_index("label")["joules_per_token_median"]
    assert 1.05 < by_label["feature"] / by_label["main"] < 1.15


def test_list_runs_filters(seeded_db: Path) -> None:
    assert len(list_runs(seeded_db, label="feature")) == 3
    assert len(list_runs(seeded_db, limit=2)) == 2
    both = list_runs(seeded_db, label=["main", "feature"], status="ok", limit=None)
    assert len(both) == 11
    assert list_runs(seeded_db, suite=None).empty
    newest_first = list(list_runs(seeded_db, limit=None)["started_at"])
    assert newest_first == sorted(newest_first, reverse=True)
    with pytest.raises(StoreError, match="unknown runs column 'colour'"):
        list_runs(seeded_db, colour="red")


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_export_formats(seeded_db: Path, tmp_path: Path, fmt: str) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (path,) = export(seeded_db, fmt, out_dir)
    assert path == out_dir / f"greenbench.{fmt}"
    frame = {"csv": pd.read_csv, "parquet": pd.read_parquet}.get(fmt, pd.read_json)(path)
    assert len(frame) == 11 * 3 + 1  # ok runs × repeats, plus the failed run's single row
    stored = read_frame(seeded_db, "SELECT run_id, repeat, joules_per_token FROM results")
    merged = stored.merge(frame, on=["run_id", "repeat"], suffixes=("", "_x"))
    assert len(merged) == 33
    assert (merged["joules_per_token"] - merged["joules_per_token_x"]).abs().max() < 1e-12
    failed = frame[frame["status"] == "failed"]
    assert len(failed) == 1 and pd.isna(failed["repeat"]).all()
    assert set(frame["energy_source"]) == {"rapl", "estimate"}
    if fmt == "json":
        assert isinstance(json.loads(path.read_text())[0]["config"], dict)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_export_carries_each_repeat_s_trust(tmp_path: Path, fmt: str) -> None:
    """Every exported repeat says how far to trust it (the trust model's markers and the
    interval its run's repeats allow) beside the columns behind it; no pid or command line."""
    db = tmp_path / "t.duckdb"
    outcome = make_outcome()
    with Store(db) as store:
        store.begin_run(run_row("aaaaaaaaaaaa"))
        store.finish_run("aaaaaaaaaaaa", replace(outcome, contended=False, others_busy_cores=0.0))
        store.begin_run(run_row("bbbbbbbbbbbb"))
        store.finish_run(
            "bbbbbbbbbbbb",
            replace(outcome, contended=True, others_busy_cores=1.2, other_greenbench=1,
                    warnings=["contended: 1 other greenbench process ran meanwhile (1 run) "
                              "(figures may be skewed)"]),
        )  # fmt: skip
    (path,) = export(db, fmt, tmp_path / f"out.{fmt}")
    if fmt == "csv":
        frame = pd.read_csv(path, keep_default_na=False)
    elif fmt == "json":
        frame = pd.DataFrame(json.loads(path.read_text()))
    else:
        frame = pd.read_parquet(path)
    trust = frame.groupby("run_id")["trust"].unique()
    assert list(trust["bbbbbbbbbbbb"]) == ["⚠ contended · min–max of 2"]
    assert list(trust["aaaaaaaaaaaa"]) == ["min–max of 2"]
    assert set(frame["interval"]) == {"min–max range"}
    busy = frame[frame["run_id"] == "bbbbbbbbbbbb"].iloc[0]
    assert float(busy["others_busy_cores"]) == 1.2 and int(busy["other_greenbench"]) == 1


def test_export_errors(seeded_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "results.csv"
    assert export(seeded_db, "csv", target) == [target] and target.exists()
    with pytest.raises(StoreError, match="unknown export format 'xlsx'"):
        export(seeded_db, "xlsx", tmp_path)
    with pytest.raises(StoreError, match="does not exist"):
        export(seeded_db, "csv", tmp_path / "missing" / "x.csv")


def test_a_meter_read_error_is_stored_as_unknown_energy_never_zero(tmp_path: Path) -> None:
    """A window whose counter failed mid-run goes through aggregation into the database as
    NULL energy with the meter's reason, while the run's other figures stay."""
    from dataclasses import replace

    from greenbench.aggregate import aggregate_repeat

    outcome = make_outcome()
    broken = EnergyWindow("rapl", True, 2.0, None, None, None, None, (), "read error: EIO")
    ranks = [replace(r, energy=broken) if r.energy else r for r in outcome.ranks if r.repeat == 0]
    repeat = aggregate_repeat(
        ranks, idle_power_w=9.5, peak_flops=1.1e11, n_devices=2, carbon_g_per_kwh=400.0
    )
    db = tmp_path / "r.duckdb"
    store = Store(db)
    store.begin_run(run_row("aaaaaaaaaaaa"))
    store.finish_run("aaaaaaaaaaaa", replace(outcome, repeats=[repeat], ranks=ranks))
    row = read_frame(
        db,
        "SELECT energy_j, energy_net_j, joules_per_token, co2_g, energy_note, tokens_per_s "
        "FROM results",
    ).iloc[0]
    assert pd.isna(row.energy_j) and pd.isna(row.joules_per_token) and pd.isna(row.co2_g)
    assert pd.isna(row.energy_net_j)
    assert "read error: EIO" in row.energy_note and "energy unknown" in row.energy_note
    assert row.tokens_per_s > 0


def test_check_integrity_names_what_is_wrong(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    store = Store(db)
    for run_id in ("aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"):
        store.begin_run(run_row(run_id))
    store.finish_run("aaaaaaaaaaaa", make_outcome())
    assert check_integrity(db) == []
    con = duckdb.connect(str(db))
    con.execute("DELETE FROM runs WHERE run_id = 'aaaaaaaaaaaa'")  # its results are orphans
    con.execute("UPDATE runs SET status = 'ok' WHERE run_id = 'bbbbbbbbbbbb'")  # no results
    con.execute("UPDATE runs SET status = 'weird' WHERE run_id = 'cccccccccccc'")
    con.close()
    problems = check_integrity(db)
    assert "2 results row(s) belong to no run" in problems
    assert any(p.endswith("rank_results row(s) belong to no run") for p in problems)
    assert "1 ok run(s) without results" in problems
    assert "1 run(s) with an unknown status" in problems


def test_runs_written_before_layouts_migrate_and_match_new_runs(tmp_path: Path) -> None:
    """A version-1 file as main wrote it before layouts (layout 'dp2', settings without
    layout.*, model.scan or emulate.*, the Mamba scan only in versions) migrates: each old run
    gets its layout and kernel, and the config_key a new run of the same configuration gets."""
    from importlib import resources

    from greenbench.launcher.resolve import resolve_quota
    from greenbench.spec import expand
    from greenbench.vocabulary import config_key as key_of

    def new_spec(workload: str, overrides: dict[str, Any]):
        (spec,) = expand(workload, [overrides])
        spec.settings.update(device="cpu", precision="fp32")
        return resolve_quota(spec)

    new_ddp = new_spec("data-parallel", {"strategy": "ddp", "data.lengths": "fixed"})
    new_fsdp = new_spec("data-parallel", {"strategy": "fsdp", "data.lengths": "fixed"})
    new_mamba = new_spec("transformer-vs-mamba", {"model.family": "mamba", "data.seq_len": 256})
    new_ddp.settings["model.scan"] = new_fsdp.settings["model.scan"] = "none"
    new_mamba.settings["model.scan"] = "native"
    # settings that came after version 1 (a version-1 file holds none of them)
    added = ("layout.", "model.scan", "emulate.", "debug.abort_at_exit_rank", "fsdp.", "odc.")
    added += ("data.cost_a", "data.cost_b", "data.chain_seed", "train.until", "eval.", "target.")
    added += ("ddp.", "ckpt.", "fault.", "train.activation_checkpointing", "energy.idle_max_age_s")

    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute(resources.files("greenbench").joinpath("store_schema.sql").read_text())
    con.execute("INSERT INTO schema_version VALUES (1, now())")
    for run_id, spec, layout, versions in (
        ("aaaaaaaaaaaa", new_ddp, "dp2", {}),
        ("bbbbbbbbbbbb", new_fsdp, "dp2", {}),
        ("cccccccccccc", new_mamba, "dp1", {"mamba_cpu_scan": "native"}),
    ):
        old_settings = {k: v for k, v in spec.settings.items() if not k.startswith(added)}
        s = spec.settings
        row = run_row(
            run_id,
            status="ok",
            workload=spec.workload,
            strategy=s["strategy"],
            model_family=s["model.family"],
            layout=layout,
            nproc=s["nproc"],
            config_key="0123456789abcdef",  # whatever the old rules gave
            started_at="2026-11-01",
        )
        row["config"] = json.dumps({"workload": spec.workload, "settings": old_settings})
        row["hardware"], row["versions"] = json.dumps({}), json.dumps(versions)
        cols = sorted(row)
        con.execute(
            f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [row[c] for c in cols],
        )
    con.close()

    Store(db)  # migrates
    runs = {
        r["run_id"]: r
        for r in read_frame(db, "SELECT * FROM runs ORDER BY run_id").to_dict("records")
    }
    ddp, fsdp, mamba = (runs[k] for k in sorted(runs))
    assert (ddp["layout"], ddp["dp_replicate"], ddp["dp_shard"]) == ("dpr2-dps1-tp1-pp1-cp1", 2, 1)
    assert (fsdp["layout"], fsdp["dp_replicate"], fsdp["dp_shard"]) == (
        "dpr1-dps2-tp1-pp1-cp1",
        1,
        2,
    )
    assert mamba["layout"] == "dpr1-dps1-tp1-pp1-cp1" and (mamba["tp"], mamba["pp"]) == (1, 1)
    assert json.loads(mamba["kernels"]) == {"scan": "native"}
    assert json.loads(ddp["kernels"]) == {"attention": "sdpa"}
    assert not ddp["rank_cpu_quota"]
    for old, new in ((ddp, new_ddp), (fsdp, new_fsdp), (mamba, new_mamba)):
        assert old["config_key"] == key_of(spec_identity(new)), old["run_id"]


def test_runs_under_cpu_quotas_are_renamed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 6: a run whose ranks ran under CPU quotas gets "cpu-quota" in its name, as new
    runs are named; other runs keep theirs."""
    db = tmp_path / "v5.duckdb"
    with monkeypatch.context() as patch:
        patch.setattr(store_mod, "SCHEMA_VERSION", 5)  # this file stops at version 5
        store = Store(db)
        store.begin_run(run_row("aaaaaaaaaaaa", config_name="odc×4", rank_cpu_quota=True))
        store.begin_run(run_row("bbbbbbbbbbbb", config_name="odc×4", rank_cpu_quota=False))
        store.begin_run(run_row("cccccccccccc", config_name="ddp×2", rank_cpu_quota=None))
    Store(db)  # migrates to the current version
    names = read_frame(db, "SELECT run_id, config_name FROM runs ORDER BY run_id")
    assert list(names.config_name) == ["odc×4 cpu-quota", "odc×4", "ddp×2"]
    Store(db)  # nothing applied twice
    assert (
        read_frame(db, "SELECT config_name FROM runs").config_name.str.count("cpu-quota").sum() == 1
    )
