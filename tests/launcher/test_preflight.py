"""What is refused before anything runs: configurations that cannot fit this machine (memory,
time), forced energy sources that cannot measure the run, and bad input of every shape. Refused
means one line, exit 2, and no database; in a suite, a configuration that cannot fit is stored
`skipped` with its reason and the others run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenbench.cli import main
from greenbench.energy import Probe
from greenbench.energy.rapl import RaplMeter
from greenbench.errors import DoesNotFit
from greenbench.launcher import launch
from greenbench.launcher.execute import Execution
from greenbench.launcher.idle import NO_BASELINE
from greenbench.launcher.runners import torchrun
from greenbench.results import RankResult
from greenbench.spec import DEFAULTS, expand
from greenbench.store import read_frame

QUICK = [
    "--set", "model.family=transformer", "--set", "data.seq_len=32", "--set", "train.steps=1",
    "--set", "train.warmup_steps=0", "--set", "train.min_window_s=0", "--set", "energy.idle_s=0",
    "--set", "repeats=1",
    # what is refused here (memory, time, devices) is the CPU's: the same on a GPU machine
    "--set", "device=cpu",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GREENBENCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def fake_execute(spec, rdzv=None, *, keep_logs=None, phases=None):
    """The launcher boundary: what the ranks of ``spec`` would have returned."""
    s = spec.settings
    return Execution(
        [
            RankResult(
                rank=r,
                local_rank=r,
                host="h",
                repeat=k,
                tokens=100,
                seconds=0.5,
                compute_s=0.5,
                comm_s=0.0,
                wait_s=0.0,
                step_times_s=(0.5,),
                peak_mem_bytes=1,
                flops=1e6,
                loss=6.0,
                n_microbatches=1,
                energy=None,
            )
            for k in range(s["repeats"])
            for r in range(s["nproc"] * s["nnodes"])
        ]
    )


def run(*args: str):
    return CliRunner().invoke(main, ["run", *args])


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("model.size=7b", r"needs at least [\d.,]+ GiB per node .* GiB of memory available"),
        ("data.seq_len=1000000000", r"needs at least [\d.,]+ GiB per node"),
        ("repeats=1000000000", r"needs at least [\d.,]+ days even at 100 % of the device peak"),
    ],
)
def test_one_configuration_that_cannot_fit_is_refused_with_its_estimate(
    tmp_path, monkeypatch, setting, named
):
    # the CPU peak as if calibrated on a quiet machine: on a busy one the calibration is not
    # trusted, the time check is skipped, and a billion repeats would really start
    monkeypatch.setattr(torchrun, "trusted_peak", lambda spec, peak: peak)
    db = tmp_path / "r.duckdb"
    result = run("--workload", "transformer-vs-mamba", *QUICK, "--set", setting, "--db", str(db))
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert re.search(named, line) and "--force" in line
    assert not db.exists()


def test_in_a_suite_it_is_stored_skipped_and_the_rest_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(torchrun, "execute", fake_execute)
    db = tmp_path / "r.duckdb"
    result = run(
        "--workload", "transformer-vs-mamba", *QUICK, "--set", "model.size=tiny,7b",
        "--db", str(db),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    runs = read_frame(db, "SELECT model_size, status, error FROM runs ORDER BY model_size")
    assert runs["status"].tolist() == ["skipped", "ok"]  # 7b, tiny
    assert runs["error"][0].startswith("cannot fit this machine: needs at least")


def test_force_runs_what_the_check_refuses(tmp_path, monkeypatch):
    monkeypatch.setattr(torchrun, "execute", fake_execute)
    monkeypatch.setattr(torchrun, "why_it_cannot_fit", lambda spec, peak: "too big (test)")
    (spec,) = expand(
        "transformer-vs-mamba",
        [{"model.family": "transformer", "data.seq_len": 64, "repeats": 1, "energy.idle_s": 0.0}],
    )
    with pytest.raises(DoesNotFit, match="too big"):
        launch.run_specs([spec], tmp_path / "a.duckdb")
    assert not (tmp_path / "a.duckdb").exists()
    forced = launch.RunOptions(force=True)
    assert launch.run_specs([spec], tmp_path / "b.duckdb", forced).statuses == ["ok"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--set", "energy.region=Atlantis"], "unknown region 'Atlantis'"),
        (["--energy-source", "rapl"], "--energy-source rapl is not available here"),
        (["--energy-source", "nvml", "--device", "cpu"], "nvml reads GPUs"),
        (["--set", f"seed={2**63}"], "seed must be at most 2**63 - 1"),
        (["--set", "data.seq_len=,,,"], "sweeps no values"),
        (
            [
                "--set",
                "nnodes=2",
                "--set",
                "strategy=ddp",
                "--set",
                "nproc=1",
                "--set",
                "data.global_batch=2",
            ],
            "needs --rdzv-endpoint",
        ),  # from --set, not only --nnodes
        (["--set", "energy.idle_s=3000"], "energy.idle_s=3000 is longer than 60 s"),
    ],
)
def test_input_gaps_are_one_line_exit_2_before_anything_runs(tmp_path, monkeypatch, args, named):
    # no RAPL on any machine, as on the reference ones (a GPU host may well expose it)
    no_rapl = Probe("rapl", False, "no powercap tree (test)")
    monkeypatch.setattr(RaplMeter, "probe", classmethod(lambda cls: no_rapl))
    db = tmp_path / "r.duckdb"
    result = run("--workload", "transformer-vs-mamba", *QUICK, *args, "--db", str(db))
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert named in line
    assert not db.exists()


def test_a_nested_sweep_in_a_suite_file_is_one_line(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text(
        '[[entries]]\nworkload = "transformer-vs-mamba"\nset = { "data.seq_len" = [[128]] }\n'
    )
    result = run("--suite", str(suite), "--db", str(tmp_path / "r.duckdb"))
    assert result.exit_code == 2 and "a sweep is a flat list" in result.output
    assert not (tmp_path / "r.duckdb").exists()


# ------------------------------------------------------------------------ properties

KEYS = st.sampled_from([*DEFAULTS, "model", "bogus", "data.seq", ""])
SCALARS = st.one_of(
    st.integers(-3, 3000),
    st.integers(2**62, 2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet="abc,.=[]{} 0123456789-", max_size=10),
    st.sampled_from(["auto", "tiny", "7b", "fsdp", "ddp", "mamba", "true", ""]),
)
ASSIGNMENT = st.tuples(KEYS, st.one_of(SCALARS, st.lists(SCALARS, max_size=2))).map(
    lambda kv: f"{kv[0]}={','.join(map(str, kv[1])) if isinstance(kv[1], list) else kv[1]}"
)
TOML_VALUE = st.one_of(
    st.integers(-3, 3000).map(str),
    st.sampled_from(['"tiny"', '"auto"', "[128, 256]", "[[128]]", "[]", "true", "1.5", '"x"']),
)


def stub_the_run(monkeypatch) -> None:
    """The launcher boundary: no rank processes, no idle-power sampling of the machine."""
    monkeypatch.setattr(torchrun, "execute", fake_execute)
    monkeypatch.setattr(torchrun.IdlePower, "get", lambda self, spec, phases=None: NO_BASELINE)


def check_outcome(result, db: Path) -> None:
    assert result.exit_code in (0, 1, 2), result.output
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert not db.exists(), result.output


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(assignments=st.lists(ASSIGNMENT, max_size=3))
def test_random_set_values_never_give_a_traceback(tmp_path_factory, monkeypatch, assignments):
    stub_the_run(monkeypatch)
    db = tmp_path_factory.mktemp("prop") / "r.duckdb"
    args = [a for assignment in assignments for a in ("--set", assignment)]
    result = run("--workload", "transformer-vs-mamba", *QUICK, *args, "--db", str(db))
    check_outcome(result, db)


# each example writes a suite and goes through the CLI's whole start (about 1.5 s here): 20 keep
# the file under half a minute
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    table=st.dictionaries(KEYS.filter(bool), TOML_VALUE, max_size=3),
    workload=st.sampled_from(['"transformer-vs-mamba"', '"data-parallel"', '"nope"', "3"]),
)
def test_random_suite_files_never_give_a_traceback(tmp_path_factory, monkeypatch, table, workload):
    stub_the_run(monkeypatch)
    folder = tmp_path_factory.mktemp("prop")
    db, suite = folder / "r.duckdb", folder / "s.toml"
    entries = ", ".join(f'"{k}" = {v}' for k, v in table.items())
    suite.write_text(
        '[defaults]\nrepeats = 1\n"train.steps" = 1\n"train.warmup_steps" = 0\n'
        '"train.min_window_s" = 0\n"energy.idle_s" = 0\n'
        f"[[entries]]\nworkload = {workload}\nset = {{ {entries} }}\n"
    )
    result = run("--suite", str(suite), "--db", str(db))
    check_outcome(result, db)


# ------------------------------------------------------------------ devices per configuration


def test_too_few_gpus_is_a_reason_with_the_counts(monkeypatch):
    import torch

    from greenbench.launcher.preflight import why_too_few_devices

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # one visible GPU
    (two,) = expand(
        "data-parallel", [{"device": "cuda", "strategy": "ddp", "data.lengths": "fixed"}]
    )
    assert why_too_few_devices(two) == "needs 2 device(s) per node, 1 CUDA device(s) visible"
    assert why_too_few_devices(two, limit=4) is not None  # a limit never adds GPUs
    (one,) = expand("transformer-vs-mamba", [{"device": "cuda", **ONE_CONFIG}])
    assert why_too_few_devices(one) is None
    (cpu,) = expand(
        "data-parallel", [{"device": "cpu", "strategy": "ddp", "data.lengths": "fixed"}]
    )
    assert why_too_few_devices(cpu) is None  # CPU ranks share the cores: no limit unless lent
    assert (
        why_too_few_devices(cpu, limit=1)
        == "needs 2 device(s) per node, 1 device(s) lent (--devices)"
    )


ONE_CONFIG = {"model.family": "transformer", "data.seq_len": 64}


def test_posttrain_on_one_device_runs_every_one_device_configuration(tmp_path, monkeypatch):
    """The whole suite on a node that lends one device: the one-rank configurations run, the
    others are stored skipped with their reason, and the exit status is 0."""
    monkeypatch.setattr(torchrun, "execute", fake_execute)
    db = tmp_path / "r.duckdb"
    result = run("--suite", "posttrain", "--devices", "1", "--device", "cpu",
                 "--set", "energy.idle_s=0", "--db", str(db))  # fmt: skip
    assert result.exit_code == 0, result.output
    runs = read_frame(db, "SELECT nproc, status, error FROM runs")
    assert len(runs) == 27
    ran, skipped = runs[runs["nproc"] == 1], runs[runs["nproc"] > 1]
    assert len(ran) == 12 and set(ran["status"]) == {"ok"}
    assert len(skipped) == 15 and set(skipped["status"]) == {"skipped"}
    assert all(
        re.fullmatch(r"cannot fit this machine: needs [24] device\(s\) per node, 1 device\(s\) "
                     r"lent \(--devices\) \(--force runs it anyway\)", e)
        for e in skipped["error"]
    )  # fmt: skip
    assert "12/27 configurations ok, 15 skipped (cannot run on this machine)" in result.output


def test_nothing_that_can_run_is_one_line_exit_2_and_no_database(tmp_path):
    db = tmp_path / "r.duckdb"
    result = run("--workload", "data-parallel", *QUICK, "--devices", "1", "--db", str(db))
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.endswith(
        "none of the 4 configurations can run on this machine: 4 × needs 2 device(s) per node, "
        "1 device(s) lent (--devices) (--force runs them anyway)"
    )
    assert not db.exists()
