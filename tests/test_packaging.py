"""The standard workloads and the shipped suites travel inside the package: the repository's
top-level ``workloads/`` folder is installed as ``greenbench.workloads`` (setup.py maps it), a
built wheel holds its modules and the suites as package data, and loading a suite by name reads
it through importlib.resources, not from the current directory. An installed wheel (not this
editable checkout) runs the smoke suite from any directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from greenbench import spec, suite

ROOT = Path(__file__).resolve().parents[1]


def test_suites_load_from_the_package_from_any_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # any directory
    assert set(suite.available_suites()) >= {"smoke", "posttrain", "odc"}
    smoke = suite.load_suite("smoke")
    assert smoke.name == "smoke"
    # read where the package greenbench.workloads.suites lies: here, the checkout's workloads/
    folder = Path(str(resources.files(suite.SUITES_PACKAGE)))
    assert Path(smoke.source) == folder / "smoke.toml"
    assert folder == ROOT / "workloads" / "suites"


def test_a_checkout_imports_its_own_workloads():
    """From this checkout (installed editable or on the import path), greenbench.workloads is
    its top-level workloads/ folder, not another checkout's nor an installed copy."""
    import greenbench.workloads

    assert Path(greenbench.workloads.__file__) == ROOT / "workloads" / "__init__.py"
    assert Path(greenbench.__file__) == ROOT / "greenbench" / "__init__.py"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the checkout's sources, so that the build neither writes
    into the checkout (build/, *.egg-info) nor packs stale files a checkout's build/ may hold."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in ("greenbench", "workloads"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "-w", str(tmp / "dist"), "-q"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (built,) = (tmp / "dist").glob("greenbench-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_ships_every_workload_and_suite_inside_greenbench(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    folder = ROOT / "workloads"
    shipped = {
        f"greenbench/workloads/{p.relative_to(folder).as_posix()}"
        for pattern in ("*.py", "suites/*.py", "suites/*.toml")
        for p in folder.glob(pattern)
    }
    assert {"greenbench/workloads/__init__.py", "greenbench/workloads/suites/smoke.toml"} <= shipped
    assert shipped <= names
    assert not any(name.startswith("workloads/") for name in names)  # not a top-level package


#: the smoke suite's every workload, model family and strategy, at one sequence length (its
#: second length runs the same code from the same wheel), one measured step a window and no
#: idle sampling: what is tested is whose code runs, and each configuration costs a worker
SHORT = {"data.seq_len": 128, "train.steps": 1, "train.min_window_s": 0.0, "energy.idle_s": 0.0}


def clean_env(home: Path) -> dict[str, str]:
    """This process's environment without what could point Python at the checkout (or keep
    it from writing bytecode, which the test reads as a trace of what the workers imported)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "VIRTUAL_ENV")
        and k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "GREENBENCH_DB")
    }
    env["HOME"] = str(home)  # no user site-packages, no ~/.cache of the caller's
    return env


@pytest.mark.slow
def test_the_installed_wheel_runs_the_smoke_suite_from_any_directory(wheel: Path, tmp_path):
    """The wheel, installed (not editable) into a fresh virtual environment, runs
    ``greenbench run --suite smoke`` from a temporary directory, and every greenbench module
    that run imports, the launcher's and the workers', is the wheel's.

    The environment sees the system site-packages (torch and the other dependencies are not
    installed again), where CI also has this checkout installed in editable mode. That install
    does not shadow the wheel: its finder is appended to ``sys.meta_path``, after the path
    finder, and the environment's site-packages come before the system's on ``sys.path``. The
    test checks both facts rather than assuming them."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
        check=True,
        capture_output=True,
    )
    python = venv / "bin" / "python"
    subprocess.run(
        # --no-compile: the bytecode found after the run is what the run itself imported
        [python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-compile",
         "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    work = tmp_path / "elsewhere"  # neither the checkout nor the environment
    work.mkdir()
    env = clean_env(tmp_path / "home")

    def in_venv(code: str) -> str:
        out = subprocess.run(
            [python, "-c", code], cwd=work, env=env, check=True, capture_output=True, text=True
        )
        return out.stdout.strip()

    site = Path(in_venv("import sysconfig; print(sysconfig.get_path('purelib'))")).resolve()
    for module in ("greenbench.cli", "greenbench.workloads"):
        imported = Path(in_venv(f"import {module}; print({module}.__file__)")).resolve()
        assert imported.is_relative_to(site / "greenbench"), f"{imported} is not the wheel's copy"
        assert not imported.is_relative_to(ROOT)
    script = venv / "bin" / "greenbench"
    assert script.read_text().splitlines()[0] == f"#!{python}"  # the entry point runs the venv
    worker_pyc = site / "greenbench" / "rank" / "__pycache__"
    assert not list(worker_pyc.glob("worker.*.pyc"))  # not imported yet (--no-compile)

    db = work / "r.duckdb"
    sets = [a for k, v in SHORT.items() for a in ("--set", f"{k}={v}")]
    run = subprocess.run(
        [script, "run", "--suite", "smoke", "--device", "cpu", "--repeats", "1", "--db", str(db),
         *sets],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    # the workers (python -m greenbench.rank.worker; the launcher never imports that module)
    # compiled the wheel's copy: they imported the wheel, not the checkout
    assert list(worker_pyc.glob("worker.*.pyc"))
    from greenbench.store.queries import list_runs

    runs = list_runs(db, limit=None)
    expected = spec.expand_suite(
        suite.load_suite("smoke"), {"device": "cpu", "repeats": 1, **SHORT}, label=None
    )
    assert len(runs) == len(expected) > 0
    assert sorted(runs["config_name"]) == sorted(s.name for s in expected)
    assert {s["model.family"] for s in expected} == {"transformer", "mamba", "mamba2"}
    assert {s["strategy"] for s in expected} == {"single", "ddp"}
    assert set(runs["status"]) == {"ok"}, runs[["config_name", "status", "error"]]
    assert (runs["suite"] == "smoke").all() and (runs["n_repeats"] == 1).all()
    assert (runs["tokens_per_s_median"] > 0).all()
