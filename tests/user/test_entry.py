"""Loading a user workload from its entry point: what goes wrong is one line naming the entry point
and the problem, exit 2, and nothing written (no database file)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from greenbench.cli import main
from greenbench.errors import SpecError
from greenbench.spec import expand
from greenbench.user import Batch, Workload, entry
from greenbench.workloads import get_workload

GOOD = """
    import torch
    from greenbench import Batch, Workload

    def build(ctx):
        return torch.nn.Linear(ctx.settings["width"], 4)

    def batch(ctx, step):
        return Batch(data=torch.zeros(2, 4), tokens=2)

    def loss(model, x):
        return model(x).mean()

    workload = Workload(name="ok", build_model=build, batch=batch, loss=loss,
                        settings={"width": 4, "scale": 1.0})
"""
BAD = {
    "gbe_raises": "def workload():\n    raise ValueError('boom')\n",
    "gbe_wrong": "def workload():\n    return 42\n",
    "gbe_broken": "import gbe_no_such_dependency\n",
    "gbe_typo": "def workload(:\n",
    "gbe_exits": "import sys\nsys.exit(3)\n",
    "gbe_factory_exits": "import sys\ndef workload():\n    sys.exit(3)\n",
}


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Throwaway modules on the import path: a good workload and broken ones."""
    (tmp_path / "gbe_good.py").write_text(textwrap.dedent(GOOD))
    for name, text in BAD.items():
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        ("gbe_missing.bench:workload", "cannot import module 'gbe_missing.bench'"),
        ("gbe_raises:workload", "raised ValueError: boom"),
        ("gbe_wrong:workload", "returned int, not a greenbench.Workload"),
        ("gbe_good:nope", "module 'gbe_good' has no 'nope'"),
        ("gbe_broken:workload", "importing module 'gbe_broken' failed: ModuleNotFoundError"),
        ("gbe_typo:workload", "importing module 'gbe_typo' raised SyntaxError"),
        ("gbe_good:", "write it as module.path:attribute"),
        # 3 means "regression" to CI: a module's own sys.exit is no status of greenbench's
        ("gbe_exits:workload", "importing module 'gbe_exits' called sys.exit(3)"),
        ("gbe_factory_exits:workload", "called sys.exit(3)"),
    ],
)
def test_a_bad_entry_point_is_one_line_exit_2_nothing_written(
    modules: Path, tmp_path: Path, ref: str, problem: str
):
    db = tmp_path / "out" / "r.duckdb"
    db.parent.mkdir()
    result = CliRunner().invoke(main, ["run", "--workload", ref, "--db", str(db)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and ref in line and problem in line, line
    assert list(db.parent.iterdir()) == []


@pytest.mark.parametrize(
    ("sets", "problem"),
    [
        (["user.widht=8"], "unknown setting 'user.widht' (did you mean 'user.width'?)"),
        (["user.width=wide"], "setting 'user.width' expects int, got 'wide'"),
        (["data.seq_len=64"], "setting 'data.seq_len' is about greenbench's own models"),
        (["strategy=fsdp"], "runs under single, ddp (its Workload.strategies), not strategy=fsdp"),
        (["train.warmup_steps=0"], "train.warmup_steps must be >= 1"),
    ],
)
def test_user_settings_are_checked_like_greenbench_s(
    modules: Path, tmp_path: Path, sets: list[str], problem: str
):
    db = tmp_path / "r.duckdb"
    args = ["run", "--workload", "gbe_good:workload", "--db", str(db)]
    result = CliRunner().invoke(main, [*args, *(a for s in sets for a in ("--set", s))])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert problem in line and "gbe_good:workload" in line, line
    assert not db.exists()


def test_a_user_workload_expands_with_its_own_settings_only(modules: Path):
    (spec,) = expand("gbe_good:workload", [{"user.width": "8", "nproc": 1}])
    assert spec.workload == "gbe_good:workload"
    assert spec["user.width"] == 8 and spec["user.scale"] == 1.0
    assert not any(k.startswith(("model.", "data.")) for k in spec.settings)
    assert spec.name == "gbe_good:workload user.scale=1.0 user.width=8 single×1"
    sweep = expand("gbe_good:workload", [{"user.width": ["4", "8"]}])
    assert [s["user.width"] for s in sweep] == [4, 8]
    with pytest.raises(SpecError, match=r"'user\.width'.*no user settings"):
        expand("transformer-vs-mamba", [{"user.width": 8}])


def test_the_workload_is_checked_field_by_field(modules: Path):
    def fn(*_):
        return None

    inf, nan = float("inf"), float("nan")

    good = Workload(name="w", build_model=fn, batch=fn, loss=fn)
    entry.check(good, "here")
    for bad, problem in (
        (Workload(name="w", build_model=fn, batch=fn, loss=fn, strategies=("hybrid",)), "hybrid"),
        (Workload(name="w", build_model=fn, batch=fn, loss=fn, flops_per_token=-1), "positive"),
        (Workload(name="w", build_model=fn, batch=fn, loss=fn, flops_per_token=inf), "finite"),
        (Workload(name="w", build_model=fn, batch=fn, loss=fn, flops_per_token=nan), "finite"),
        (Workload(name="w", build_model=fn, batch=fn, loss=fn, settings={"x": [1]}), "list"),
        (Workload(name="", build_model=fn, batch=fn, loss=fn), "non-empty"),
        (Workload(name="w", build_model=1, batch=fn, loss=fn), "build_model"),  # type: ignore[arg-type]
    ):
        with pytest.raises(entry.WorkloadLoadError, match=problem):
            entry.check(bad, "here")
    assert isinstance(Batch(data=None, tokens=1), Batch)


def test_an_unknown_name_lists_the_choices():
    with pytest.raises(SpecError, match=r"unknown workload 'nope'.*module\.path:attribute"):
        get_workload("nope")


@pytest.mark.parametrize("value", [-1e9, 0, float("nan"), float("inf"), "many", None])
def test_flops_per_token_from_a_function_must_be_finite_and_positive(value: object):
    def fn(*_):
        return None

    wl = Workload(name="w", build_model=fn, batch=fn, loss=fn, flops_per_token=lambda s: value)
    entry.check(wl, "here")  # a function's value is known only with a run's settings
    with pytest.raises(
        ValueError, match=r"flops_per_token\(settings\) returned .*finite number > 0"
    ):
        wl.flops_per_token_for({})
    good = Workload(name="w", build_model=fn, batch=fn, loss=fn, flops_per_token=lambda s: 6e6)
    assert good.flops_per_token_for({}) == 6e6


SWEPT = """
    import torch
    from greenbench import Batch, Workload

    def build(ctx):
        return torch.nn.Linear(4, 4)

    def batch(ctx, step):
        return Batch(data=torch.zeros(2, 4), tokens=2)

    def loss(model, x):
        return model(x).mean()

    def flops(settings):
        return -1e9 if settings["width"] == 8 else 6e3

    workload = Workload(name="swept", build_model=build, batch=batch, loss=loss,
                        flops_per_token=flops, settings={"width": 4})
"""


@pytest.mark.slow
def test_a_bad_flops_per_token_value_fails_its_run_and_the_others_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "gbe_swept.py").write_text(textwrap.dedent(SWEPT))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    db = tmp_path / "r.duckdb"
    quick = ["--set", "train.steps=2", "--set", "train.min_window_s=0.1", "--repeats", "1"]
    result = CliRunner().invoke(
        main,
        ["run", "--workload", "gbe_swept:workload", "--set", "user.width=4,8", *quick,
         "--set", "energy.idle_s=0", "--db", str(db)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output  # a run failed; the suite went on
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute(
            "SELECT config_name, status, error, "
            "(SELECT min(mfu) FROM results r WHERE r.run_id = runs.run_id) "
            "FROM runs ORDER BY config_name"
        ).fetchall()
    (good, bad) = runs
    assert "user.width=4" in good[0] and good[1] == "ok" and good[3] > 0
    assert "user.width=8" in bad[0] and bad[1] == "failed" and bad[3] is None
    assert "flops_per_token(settings) returned -1000000000.0" in bad[2], bad[2]
